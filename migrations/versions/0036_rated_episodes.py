"""The live thumbs-down cell's ratings folded (issue 6 with issue 39's feedback cell).

`gate_folds.ratings`: per (rollout, stage, arm) state, the ratings folded so far (up to
which pair and which rating id) and each segment's cell sums (`gate.verdicts.feedback`).
`gate_rated_episodes`: each episode's running count and thumbs-down sum per side, per
declared segment and pooled (`all`): the episode sums of squares are not additive over
ratings, so a new rating needs its episode's S_e and n_e. Existing states have no
`ratings` and fold their ratings once at the next look (`FOLD_VERSION` 14 refolds them).

Revision ID: 0036
Revises: 0035
Create Date: 2026-11-29 18:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

# Written out, not imported: a migration keeps the types it was written with.
JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")

revision: str = "0036"
down_revision: str | None = "0035"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add the state column and the episodes' table."""
    with op.batch_alter_table("gate_folds") as batch:
        batch.add_column(sa.Column("ratings", JSON, nullable=True))
    op.create_table(
        "gate_rated_episodes",
        sa.Column("rollout_id", sa.Integer(), nullable=False),
        sa.Column("stage", sa.Integer(), nullable=False),
        sa.Column("arm", sa.String(length=64), nullable=False),
        sa.Column("segment", sa.String(length=64), nullable=False),
        sa.Column("episode", sa.Text(), nullable=False),
        sa.Column("nb", sa.BigInteger(), nullable=False),
        sa.Column("sb", sa.BigInteger(), nullable=False),
        sa.Column("nc", sa.BigInteger(), nullable=False),
        sa.Column("sc", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["rollout_id"],
            ["rollouts.id"],
            name=op.f("fk_gate_rated_episodes_rollout_id_rollouts"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "rollout_id", "stage", "arm", "segment", "episode", name=op.f("pk_gate_rated_episodes")
        ),
    )


def downgrade() -> None:
    """Drop them."""
    op.drop_table("gate_rated_episodes")
    with op.batch_alter_table("gate_folds") as batch:
        batch.drop_column("ratings")
