"""Verdicts keep the primary gain per load band (issue 26).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-06 09:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("verdicts") as batch:
        batch.add_column(sa.Column("bands", JSON, nullable=False, server_default="[]"))


def downgrade() -> None:
    with op.batch_alter_table("verdicts") as batch:
        batch.drop_column("bands")
