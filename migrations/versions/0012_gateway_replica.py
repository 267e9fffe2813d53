"""Requests name the gateway replica whose in-flight counts they carry.

Each gateway process counts only its own in-flight calls; with the replica named, a pair's
load is the sum over replicas (`gate.pairs.load`).

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-24 22:40:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.add_column(sa.Column("gateway_replica", sa.String(length=128), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.drop_column("gateway_replica")
