"""Evaluations carry their generation's start (issue 43): `generation_started_at`, the key
`specgate db partition evaluations` partitions them by, so an evaluations partition holds
the evaluations of one generations partition and retention drops both on the same cut.

Backfilled from the generations in batches of their ids, each batch its own transaction
(Postgres): a large install's evaluations are never rewritten in one. An evaluation whose
generation is gone (none should be) takes its own `created_at`. The NOT NULL is checked by
a constraint added first as NOT VALID (so a row inserted during the backfill must carry
it) and validated without blocking writes; SET NOT NULL then needs no scan of its own.

Revision ID: 0032
Revises: 0031
Create Date: 2026-11-29 15:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0032"
down_revision: str | None = "0031"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Generations (by id) whose evaluations one backfill transaction fills.
BATCH = 10_000
_FILL = """UPDATE evaluations AS e SET generation_started_at = g.started_at
FROM generations AS g WHERE g.id = e.generation_id AND g.id > :a AND g.id <= :b
AND e.generation_started_at IS NULL"""
_ORPHANS = "UPDATE evaluations SET generation_started_at = created_at "
_ORPHANS += "WHERE generation_started_at IS NULL"
_CHECK = "ck_evaluations_generation_started_at_set"


def upgrade() -> None:
    """Add `generation_started_at`, fill it from the generations, make it NOT NULL."""
    if op.get_bind().dialect.name != "postgresql":
        op.add_column(
            "evaluations",
            sa.Column("generation_started_at", sa.DateTime(timezone=True), nullable=True),
        )
        op.execute(
            "UPDATE evaluations SET generation_started_at = (SELECT started_at FROM "
            "generations AS g WHERE g.id = evaluations.generation_id)"
        )
        op.execute(_ORPHANS)
        with op.batch_alter_table("evaluations") as batch:
            batch.alter_column("generation_started_at", nullable=False)
        return
    # Re-runnable: the backfill commits as it goes, so a run stopped in it left the column
    # and the check behind (and no new revision): the next run takes them up again.
    op.execute(
        "ALTER TABLE evaluations ADD COLUMN IF NOT EXISTS generation_started_at "
        "timestamp with time zone"
    )
    op.execute(f"ALTER TABLE evaluations DROP CONSTRAINT IF EXISTS {_CHECK}")
    op.execute(
        f"ALTER TABLE evaluations ADD CONSTRAINT {_CHECK} "
        "CHECK (generation_started_at IS NOT NULL) NOT VALID"
    )
    with op.get_context().autocommit_block():
        _backfill()
    op.execute(f"ALTER TABLE evaluations VALIDATE CONSTRAINT {_CHECK}")
    op.alter_column("evaluations", "generation_started_at", nullable=False)
    op.execute(f"ALTER TABLE evaluations DROP CONSTRAINT {_CHECK}")


def _backfill() -> None:
    bind = op.get_bind()
    last = bind.execute(sa.text("SELECT max(id) FROM generations")).scalar() or 0
    for start in range(0, last, BATCH):
        bind.execute(sa.text(_FILL), {"a": start, "b": start + BATCH})
    bind.execute(sa.text(_ORPHANS))


def downgrade() -> None:
    """Drop `generation_started_at`."""
    with op.batch_alter_table("evaluations") as batch:
        batch.drop_column("generation_started_at")
