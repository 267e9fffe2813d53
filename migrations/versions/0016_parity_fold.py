"""Pairs keep their sampled-output parity differences; fold states their control cells.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-07 09:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("pairs") as batch:
        batch.add_column(sa.Column("parity", JSON, nullable=True))
    with op.batch_alter_table("gate_folds") as batch:
        batch.add_column(sa.Column("control", JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("gate_folds") as batch:
        batch.drop_column("control")
    with op.batch_alter_table("pairs") as batch:
        batch.drop_column("parity")
