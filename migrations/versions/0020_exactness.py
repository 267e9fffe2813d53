"""Per-token exactness statistics on each generation (issue 36).

`generations.exactness` holds one call's sums (`gate.exactness.TokenFit.as_dict`): tested
tokens, their fractional shares of the probability-integral-transform bins, impossible
and skipped tokens. NULL: the call carried no `top_logprobs` (nothing to test).

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-28 17:40:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    """Add the column."""
    with op.batch_alter_table("generations") as batch:
        batch.add_column(sa.Column("exactness", JSON, nullable=True))


def downgrade() -> None:
    """Drop the column."""
    with op.batch_alter_table("generations") as batch:
        batch.drop_column("exactness")
