"""The deployment's identity: one row, created here with a random id.

Gateways and the control plane of one deployment share its database, so they agree on
this id without configuration; routing messages carry it, on a channel named by it, so
deployments sharing a Redis server never apply each other's changes.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24 19:40:00.000000
"""

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    table = op.create_table(
        "deployment",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_deployment")),
    )
    op.bulk_insert(table, [{"id": uuid.uuid4().hex, "created_at": datetime.now(UTC)}])


def downgrade() -> None:
    op.drop_table("deployment")
