"""Rollouts with several candidate routes (arms), and the arm each pair was mirrored to.

`rollout_arms` holds every arm of a rollout created with several candidates (issue 40):
its name, its route, whether it is still mirrored to (`active`) or was killed on its own,
and when. `pairs.arm` names the arm whose route answered as the pair's candidate. A
rollout of one candidate has no arms and its pairs name none (NULL), as every rollout and
pair recorded before this revision.

Revision ID: 0026
Revises: 0024
Create Date: 2026-11-29 00:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0026"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    """Create the arms table and add the pair's arm."""
    op.create_table(
        "rollout_arms",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("rollout_id", sa.Integer(), nullable=False),
        sa.Column("route_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column(
            "state",
            sa.Enum(
                "active",
                "killed",
                name="arm_state",
                native_enum=False,
                create_constraint=True,
                length=16,
            ),
            nullable=False,
        ),
        sa.Column("added_at", TIMESTAMP, nullable=False),
        sa.Column("killed_at", TIMESTAMP, nullable=True),
        sa.ForeignKeyConstraint(
            ["rollout_id"],
            ["rollouts.id"],
            name=op.f("fk_rollout_arms_rollout_id_rollouts"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["route_id"], ["routes.id"], name=op.f("fk_rollout_arms_route_id_routes")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_rollout_arms")),
        sa.UniqueConstraint("rollout_id", "name", name=op.f("uq_rollout_arms_rollout_id_name")),
        sa.UniqueConstraint(
            "rollout_id", "route_id", name=op.f("uq_rollout_arms_rollout_id_route_id")
        ),
    )
    with op.batch_alter_table("pairs") as batch:
        batch.add_column(sa.Column("arm", sa.String(length=64), nullable=True))


def downgrade() -> None:
    """Drop the pair's arm and the arms table."""
    with op.batch_alter_table("pairs") as batch:
        batch.drop_column("arm")
    op.drop_table("rollout_arms")
