"""Each arm's weight in the gateway's choice of arm (issue 40, reallocation).

`rollout_arms.weight`: the arm's share of the sampled episodes is its weight over the
active arms' sum (`gate.gateway.sampling.choose_arm`). 1 for every arm, so existing
rollouts keep equal shares; set at a stage boundary when the policy's
`arms.reallocate` is on (`gate.rollouts.arms.reallocate`).

Revision ID: 0035
Revises: 0032
Create Date: 2026-11-29 15:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0035"
down_revision: str | None = "0032"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add the column, 1 for every arm."""
    with op.batch_alter_table("rollout_arms") as batch:
        batch.add_column(sa.Column("weight", sa.Float(), nullable=False, server_default="1"))


def downgrade() -> None:
    """Drop the column."""
    with op.batch_alter_table("rollout_arms") as batch:
        batch.drop_column("weight")
