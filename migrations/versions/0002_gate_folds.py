"""Incremental gate statistics: `pairs.evaluated_at` (the fold order) and `gate_folds`.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29 09:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
TIMESTAMP = sa.DateTime(timezone=True)

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("pairs", sa.Column("evaluated_at", TIMESTAMP, nullable=True))
    # Pairs closed before this revision were judged as soon as they closed, so they are
    # ready for the gate now, in closing order; an evaluation still in flight at the
    # upgrade keeps this stamp (and the fold may miss its late evaluations).
    op.execute(
        "UPDATE pairs SET evaluated_at = coalesce(completed_at, created_at) "
        "WHERE state IN ('complete', 'dropped')"
    )
    op.create_index(
        op.f("ix_pairs_rollout_id_stage_evaluated_at_id"),
        "pairs",
        ["rollout_id", "stage", "evaluated_at", "id"],
        unique=False,
    )
    op.create_table(
        "gate_folds",
        sa.Column("rollout_id", sa.Integer(), nullable=False),
        sa.Column("stage", sa.Integer(), nullable=False),
        sa.Column("policy_key", sa.String(length=64), nullable=False),
        sa.Column("watermark_at", TIMESTAMP, nullable=True),
        sa.Column("watermark_id", sa.Uuid(), nullable=True),
        sa.Column("pairs", sa.Integer(), nullable=False),
        sa.Column("warm_pairs", sa.Integer(), nullable=False),
        sa.Column("first_at", TIMESTAMP, nullable=True),
        sa.Column("last_at", TIMESTAMP, nullable=True),
        sa.Column("warmup", JSON, nullable=True),
        sa.Column("segments", JSON, nullable=False),
        sa.Column("evaluators", JSON, nullable=False),
        sa.Column("collapse", JSON, nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
        sa.ForeignKeyConstraint(
            ["rollout_id"],
            ["rollouts.id"],
            name=op.f("fk_gate_folds_rollout_id_rollouts"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("rollout_id", "stage", name=op.f("pk_gate_folds")),
    )


def downgrade() -> None:
    op.drop_table("gate_folds")
    op.drop_index(op.f("ix_pairs_rollout_id_stage_evaluated_at_id"), table_name="pairs")
    # Batch mode: SQLite rebuilds the table to drop a column.
    with op.batch_alter_table("pairs") as batch:
        batch.drop_column("evaluated_at")
