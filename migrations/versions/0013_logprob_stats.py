"""Generations keep their answer's token log-probabilities, summarised (sampled parity).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05 09:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("generations") as batch:
        batch.add_column(sa.Column("logprob_tokens", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("logprob_sum", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("generations") as batch:
        batch.drop_column("logprob_sum")
        batch.drop_column("logprob_tokens")
