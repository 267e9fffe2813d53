"""The Postgres fold per arm (issue 40): `gate_folds` keyed by arm too, and each arm's
acceptance-length sums.

A rollout with several candidates keeps one fold state per (rollout, stage, arm), over the
arm's pairs and the control pairs (`gate.stats.arms.member`), so its periodic gate folds
the new pairs instead of replaying the stage. `arm` is '' for a rollout of one candidate
(every pair of the stage): a key column cannot be NULL. The states stored before are those
('') and keep their meaning, so nothing refolds. `arm_sums`: what an arm's verdict shows
beyond its gate, folded up to its own watermark: the arm's first pair (the arms' order) and
its acceptance-length sums (`gate.verdicts.acceptance`; NULL: none, or one candidate).

Revision ID: 0030
Revises: 0028
Create Date: 2026-11-29 04:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

# Written out, not imported: a migration keeps the types it was written with.
JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")

revision: str = "0030"
down_revision: str | None = "0028"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add the arm to the key, and the arm's sums."""
    # Batch mode: SQLite rebuilds the table to change its primary key.
    with op.batch_alter_table("gate_folds") as batch:
        batch.add_column(sa.Column("arm", sa.String(length=64), nullable=False, server_default=""))
        batch.add_column(sa.Column("arm_sums", JSON, nullable=True))
        batch.drop_constraint("pk_gate_folds", type_="primary")
        batch.create_primary_key("pk_gate_folds", ["rollout_id", "stage", "arm"])


def downgrade() -> None:
    """Keep the single-candidate states (arm ''), drop the arms' and the columns."""
    op.execute("DELETE FROM gate_folds WHERE arm <> ''")
    with op.batch_alter_table("gate_folds") as batch:
        batch.drop_constraint("pk_gate_folds", type_="primary")
        batch.create_primary_key("pk_gate_folds", ["rollout_id", "stage"])
        batch.drop_column("arm_sums")
        batch.drop_column("arm")
