"""Route credentials: where a route's auth header value comes from (never the value);
engine-reported TTFT and TPOT of a generation, beside the gateway's own measurements.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24 19:40:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    json_type = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
    with op.batch_alter_table("routes") as batch:
        batch.add_column(sa.Column("auth", json_type, nullable=True))
    with op.batch_alter_table("generations") as batch:
        batch.add_column(sa.Column("engine_ttft_s", sa.Float(), nullable=True))
        batch.add_column(sa.Column("engine_tpot_s", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("generations") as batch:
        batch.drop_column("engine_tpot_s")
        batch.drop_column("engine_ttft_s")
    with op.batch_alter_table("routes") as batch:
        batch.drop_column("auth")
