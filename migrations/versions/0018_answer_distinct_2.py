"""Generations keep their answer's distinct-2, which retention's scrub of the text spares.

Sampled-output parity compares distinct word bigrams. The fold stores each pair's d when
it is stamped; the export computed the statistic from `output`, which retention scrubs
after `retention_content_days`, so a replay of an older stage saw none. The value is now
fixed when the generation lands (`gate.parity.text_distinct_2`); here, for sampled
generations whose text is still kept.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-08 09:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from gate.parity import text_distinct_2

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BATCH = 5000
_PENDING = sa.text(
    "SELECT id, output FROM generations WHERE id > :after AND output IS NOT NULL"
    " AND output_truncated IS NOT TRUE AND temperature > 0 ORDER BY id LIMIT :n"
)
_SET = sa.text("UPDATE generations SET distinct_2 = :d WHERE id = :id")


def upgrade() -> None:
    with op.batch_alter_table("generations") as batch:
        batch.add_column(sa.Column("distinct_2", sa.Float(), nullable=True))
    conn, after = op.get_bind(), 0
    while rows := conn.execute(_PENDING, {"after": after, "n": BATCH}).all():
        values = [{"id": i, "d": text_distinct_2(out, truncated=False)} for i, out in rows]
        conn.execute(_SET, values)
        after = rows[-1].id


def downgrade() -> None:
    with op.batch_alter_table("generations") as batch:
        batch.drop_column("distinct_2")
