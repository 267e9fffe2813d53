"""Each arm's outcome on a verdict of a rollout with several candidates (issue 40).

`verdicts.arms` holds the periodic gate's multi-arm look: the winner, the leader, and per
arm its state, decision, pairs, primary ratio and interval, and reasons
(`gate.stats.arms_replay.to_json`). NULL: a rollout of one candidate, or before this.

Revision ID: 0028
Revises: 0027
Create Date: 2026-11-29 01:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

# Written out, not imported: a migration keeps the types it was written with.
JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")

revision: str = "0028"
down_revision: str | None = "0027"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add the column."""
    with op.batch_alter_table("verdicts") as batch:
        batch.add_column(sa.Column("arms", JSON, nullable=True))


def downgrade() -> None:
    """Drop the column."""
    with op.batch_alter_table("verdicts") as batch:
        batch.drop_column("arms")
