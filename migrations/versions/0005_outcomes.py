"""One meaning of a generation's outcome: a `cancelled` status, and "not evaluable".

A client that leaves is neither route's failure, so it gets its own status. An evaluator
that could not judge (a cut input, a missing input, no sandbox) says so: `passed` is NULL
and `not_evaluable` holds the reason, so pass rates never count it either way.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02 09:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OLD = ("ok", "error", "timeout", "fallback", "dropped")
NEW = (*OLD, "cancelled")


def _status(values: tuple[str, ...]) -> sa.Enum:
    return sa.Enum(
        *values, name="generation_status", native_enum=False, create_constraint=True, length=16
    )


def upgrade() -> None:
    with op.batch_alter_table("generations") as batch:
        batch.alter_column("status", existing_type=_status(OLD), type_=_status(NEW))
    with op.batch_alter_table("evaluations") as batch:
        batch.alter_column("passed", existing_type=sa.Boolean(), nullable=True)
        batch.add_column(sa.Column("not_evaluable", sa.String(length=32), nullable=True))


def downgrade() -> None:
    op.execute("DELETE FROM evaluations WHERE passed IS NULL")
    op.execute("UPDATE generations SET status = 'error' WHERE status = 'cancelled'")
    with op.batch_alter_table("evaluations") as batch:
        batch.drop_column("not_evaluable")
        batch.alter_column("passed", existing_type=sa.Boolean(), nullable=False)
    with op.batch_alter_table("generations") as batch:
        batch.alter_column("status", existing_type=_status(NEW), type_=_status(OLD))
