"""The conversation or agent episode a pair's request belongs to (issue 39).

`pairs.episode` names it (text); pairs with one name are one episode, the gate's unit for
the means' confidence sequences (`gate.stats.sequences.EpisodeMean`). NULL: the pair is
its own episode.

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-28 20:50:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add the column."""
    with op.batch_alter_table("pairs") as batch:
        batch.add_column(sa.Column("episode", sa.Text(), nullable=True))


def downgrade() -> None:
    """Drop the column."""
    with op.batch_alter_table("pairs") as batch:
        batch.drop_column("episode")
