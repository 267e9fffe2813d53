"""The fold's episode sums (issue 39): a stage with shared episodes is folded, not replayed;
and the episodes a verdict tested.

`gate_folds.episodes` holds, per cell, the sums over episodes an `EpisodeMean` needs
(`gate.stats.episode_sums`) and whether an episode of the stage holds two pairs. NULL:
none folded. Stored states refold from scratch (`FOLD_VERSION` 8). `verdicts.episodes`:
the episodes among the tested pairs (NULL: no episode held two pairs, or before this).

Revision ID: 0027
Revises: 0026
Create Date: 2026-11-29 00:20:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

# Written out, not imported: a migration keeps the types it was written with.
JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")

revision: str = "0027"
down_revision: str | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add the columns."""
    with op.batch_alter_table("gate_folds") as batch:
        batch.add_column(sa.Column("episodes", JSON, nullable=True))
    with op.batch_alter_table("verdicts") as batch:
        batch.add_column(sa.Column("episodes", sa.Integer, nullable=True))


def downgrade() -> None:
    """Drop the columns."""
    with op.batch_alter_table("verdicts") as batch:
        batch.drop_column("episodes")
    with op.batch_alter_table("gate_folds") as batch:
        batch.drop_column("episodes")
