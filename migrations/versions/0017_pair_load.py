"""Pairs keep each route's load at their start; fold states the load bands' sums.

Pairs stamped before this revision keep no load (source NULL): neither the fold nor an
export gives them one, so both paths leave them out of the bands alike.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-08 09:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("pairs") as batch:
        batch.add_column(sa.Column("baseline_load", sa.Float(), nullable=True))
        batch.add_column(sa.Column("candidate_load", sa.Float(), nullable=True))
        batch.add_column(sa.Column("baseline_load_source", sa.String(16), nullable=True))
        batch.add_column(sa.Column("candidate_load_source", sa.String(16), nullable=True))
    with op.batch_alter_table("gate_folds") as batch:
        batch.add_column(sa.Column("bands", JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("gate_folds") as batch:
        batch.drop_column("bands")
    with op.batch_alter_table("pairs") as batch:
        for column in ("candidate_load_source", "baseline_load_source", "candidate_load"):
            batch.drop_column(column)
        batch.drop_column("baseline_load")
