"""Complete pairs still waiting for their evaluations: a partial index, and requeue state.

The pair sweep enqueues again the evaluation of pairs that completed but were never
evaluated (the broker was down when they completed, or the run failed), oldest first,
with a doubling back-off (`requeue_after`) and a bounded number of tries (`requeues`).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30 09:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UNEVALUATED = "state = 'complete' AND evaluated_at IS NULL"


def upgrade() -> None:
    op.add_column("pairs", sa.Column("requeues", sa.Integer(), nullable=False, server_default="0"))
    op.add_column("pairs", sa.Column("requeue_after", sa.DateTime(timezone=True), nullable=True))
    op.create_index(
        op.f("ix_pairs_completed_at"),
        "pairs",
        ["completed_at"],
        unique=False,
        postgresql_where=sa.text(UNEVALUATED),
        sqlite_where=sa.text(UNEVALUATED),
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_pairs_completed_at"), table_name="pairs")
    with op.batch_alter_table("pairs") as batch:
        batch.drop_column("requeue_after")
        batch.drop_column("requeues")
