"""The pairs a verdict left out as not load-matched (a promoted rollout routed by load).

`verdicts.unmatched` counts the stage's pairs past the warm-up that the gate did not judge
because their routes' running requests at the start were further apart than
`promotion.load_match`, or unknown (`gate.stats.policy.load_tolerance`). 0: every pair
was judged (every verdict before this column).

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-28 21:05:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add the column."""
    with op.batch_alter_table("verdicts") as batch:
        batch.add_column(sa.Column("unmatched", sa.Integer, nullable=False, server_default="0"))


def downgrade() -> None:
    """Drop the column."""
    with op.batch_alter_table("verdicts") as batch:
        batch.drop_column("unmatched")
