"""Whether a pair's own span has landed (`pairs.pair_span`).

A route call's span can land before its pair span (their parent, ended last, may go in the
gateway's next export), and then makes a stub of the pair with no request and no episode.
A pair is complete once its calls AND its pair span are in (`gate.pairs.service`), or the
worker would score it without its request and the gate fold it without its episode; at its
deadline it completes with what landed. True for every stored pair, whose facts are in or
will never come; the collector writes false on a stub and true with the pair span.

Revision ID: 0037
Revises: 0036
Create Date: 2026-11-29 18:40:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0037"
down_revision: str | None = "0036"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add the column, true for every stored pair. A constant default: Postgres rewrites no
    row, and SQLite adds it in place (a batch would copy `pairs` into a new table and drop
    the old one, whose referrers' rows would go with it)."""
    op.add_column(
        "pairs", sa.Column("pair_span", sa.Boolean(), nullable=False, server_default=sa.true())
    )


def downgrade() -> None:
    """Drop the column in place (SQLite 3.35 and later, as Postgres): no batch copy."""
    op.execute("ALTER TABLE pairs DROP COLUMN pair_span")
