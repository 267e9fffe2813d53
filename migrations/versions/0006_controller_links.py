"""Controller links: a rollout driven by Argo Rollouts or Flagger, its hook token and check-ins.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03 09:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "controller_links",
        sa.Column("rollout_id", sa.Integer(), nullable=False),
        sa.Column(
            "controller",
            sa.Enum(
                "argo-rollouts",
                "flagger",
                name="controller_kind",
                native_enum=False,
                create_constraint=True,
                length=16,
            ),
            nullable=False,
        ),
        sa.Column("token_hash", sa.String(length=64), nullable=True),
        sa.Column("poll_interval_s", sa.Float(), nullable=False),
        sa.Column("missed_polls", sa.Integer(), nullable=False),
        sa.Column("last_polled_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["rollout_id"],
            ["rollouts.id"],
            name=op.f("fk_controller_links_rollout_id_rollouts"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("rollout_id", name=op.f("pk_controller_links")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_controller_links_token_hash")),
    )


def downgrade() -> None:
    op.drop_table("controller_links")
