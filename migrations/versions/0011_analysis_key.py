"""Controller links name the API key the controller polls with.

Only that key's analysis polls count as the controller's check-ins, so another reader
polling the analysis cannot hide a controller that stopped.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04 09:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("controller_links") as batch:
        batch.add_column(sa.Column("analysis_key", sa.String(length=128), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("controller_links") as batch:
        batch.drop_column("analysis_key")
