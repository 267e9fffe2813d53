"""Evaluation inputs say when they were cut.

The gateway keeps what evaluators read (the request body, the declared inputs, the
output) up to its own limit, larger than the display captures'. What was still cut is
recorded, so an evaluator says "not evaluable (truncated)" instead of judging half an
input: `requests.truncated` lists the cut parts ("body", "inputs"), and
`generations.output_truncated` marks a cut output.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02 10:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.add_column(sa.Column("truncated", JSON, nullable=True))
    with op.batch_alter_table("generations") as batch:
        batch.add_column(sa.Column("output_truncated", sa.Boolean(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("generations") as batch:
        batch.drop_column("output_truncated")
    with op.batch_alter_table("requests") as batch:
        batch.drop_column("truncated")
