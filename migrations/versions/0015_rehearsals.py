"""Rollouts keep the latest `specgate rehearse` summary recorded for them (issue 26).

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-07 09:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "rehearsals",
        sa.Column("rollout_id", sa.Integer(), nullable=False),
        sa.Column("run_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("baseline_url", sa.String(length=512), nullable=False),
        sa.Column("candidate_url", sa.String(length=512), nullable=False),
        sa.Column("workload", sa.String(length=512), nullable=False),
        sa.Column("requests", sa.Integer(), nullable=False),
        sa.Column("at", sa.Integer(), nullable=True),
        sa.Column("decision", sa.String(length=32), nullable=False),
        sa.Column("summary", JSON, nullable=False),
        sa.Column("recorded_by", sa.String(length=128), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["rollout_id"],
            ["rollouts.id"],
            name=op.f("fk_rehearsals_rollout_id_rollouts"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("rollout_id", name=op.f("pk_rehearsals")),
    )


def downgrade() -> None:
    op.drop_table("rehearsals")
