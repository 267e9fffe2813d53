"""An index on `feedback.created_at` (issue 39): the live shadow gate reads, at each look,
the ratings made since its stage began (`gate.verdicts.feedback`); without it that read
scans every rating of every rollout. Feedback retention reads by the same column.

Revision ID: 0031
Revises: 0030
Create Date: 2026-11-29 15:10:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0031"
down_revision: str | None = "0030"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Index the ratings by when they were made."""
    op.create_index(op.f("ix_feedback_created_at"), "feedback", ["created_at"], unique=False)


def downgrade() -> None:
    """Drop the index."""
    op.drop_index(op.f("ix_feedback_created_at"), table_name="feedback")
