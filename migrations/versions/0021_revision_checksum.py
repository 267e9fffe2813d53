"""The revision a controller link's rollout judges: Flagger's webhook `checksum`.

`controller_links.revision_checksum` holds the `checksum` of the first Flagger analysis hook
once the rollout has started; a later hook with another one is a new revision that Flagger
restarted the analysis for under the same Canary. NULL: no checksum seen yet (Argo Rollouts
links, or a Flagger link before its analysis).

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-28 18:20:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add the column."""
    with op.batch_alter_table("controller_links") as batch:
        batch.add_column(sa.Column("revision_checksum", sa.String(256), nullable=True))


def downgrade() -> None:
    """Drop the column."""
    with op.batch_alter_table("controller_links") as batch:
        batch.drop_column("revision_checksum")
