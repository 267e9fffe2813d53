"""Requests and pairs keep their episode: the conversation or agent run (issue 39).

`requests.episode` and `pairs.episode` hold the id the gateway resolved once
(`gate.request.episodes`), `requests.episode_source` where it came from (header, baggage,
metadata, user, prefix). NULL: the request is its own episode, as every request and pair
recorded before this revision is.

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-28 20:40:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add the columns, and an index for the gate's look at a stage's episodes."""
    with op.batch_alter_table("requests") as batch:
        batch.add_column(sa.Column("episode", sa.Text(), nullable=True))
        batch.add_column(sa.Column("episode_source", sa.String(16), nullable=True))
    with op.batch_alter_table("pairs") as batch:
        batch.add_column(sa.Column("episode", sa.Text(), nullable=True))
    # The gate asks, every run, whether a stage's episodes hold several pairs.
    op.create_index(
        op.f("ix_pairs_rollout_id_stage_episode"), "pairs", ["rollout_id", "stage", "episode"]
    )


def downgrade() -> None:
    """Drop the columns."""
    op.drop_index(op.f("ix_pairs_rollout_id_stage_episode"), table_name="pairs")
    with op.batch_alter_table("pairs") as batch:
        batch.drop_column("episode")
    with op.batch_alter_table("requests") as batch:
        batch.drop_column("episode_source")
        batch.drop_column("episode")
