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
_LOADS = ("baseline_load", "candidate_load", "baseline_load_source", "candidate_load_source")


def upgrade() -> None:
    with op.batch_alter_table("pairs") as batch:
        for column in _LOADS[:2]:
            batch.add_column(sa.Column(column, sa.Float(), nullable=True))
        for column in _LOADS[2:]:
            batch.add_column(sa.Column(column, sa.String(16), nullable=True))
    with op.batch_alter_table("gate_folds") as batch:
        batch.add_column(sa.Column("bands", JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("gate_folds") as batch:
        batch.drop_column("bands")
    with op.batch_alter_table("pairs") as batch:
        for column in _LOADS:
            batch.drop_column(column)
