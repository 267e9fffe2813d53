"""Whether a pair's own span has landed (`pairs.pair_span`).

A route call's span can land before its pair span (their parent, ended last, may go in the
gateway's next export), and then makes a stub of the pair with no request and no episode.
A pair is complete once its calls AND its pair span are in (`gate.pairs.service`), or the
worker would score it without its request and the gate fold it without its episode; at its
deadline it completes with what landed. True for every stored pair, whose facts are in or
will never come; the collector writes false on a stub and true with the pair span.

A conversion of `pairs` stopped between its steps (`specgate db partition pairs`, resumed
by running it again) has `pairs_partitioned` and a trigger on `pairs` mirroring each row
into it by position (`NEW.*`): the column goes on both, and the mirror's update takes it,
or every insert into `pairs` would fail until the conversion ended.

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

# `gate.db.online_partition`'s names and the mirror it installs on a mutable table, as of
# this revision (a migration keeps its own copy: that module may change).
_COPY = "pairs_partitioned"
_KEY = ("id", "created_at")
_MIRROR = """
CREATE OR REPLACE FUNCTION pairs_mirror() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' OR (TG_OP = 'UPDATE' AND ({moved})) THEN
    DELETE FROM pairs_partitioned WHERE {match};
  END IF;
  IF TG_OP <> 'DELETE' THEN
    INSERT INTO pairs_partitioned VALUES (NEW.*) ON CONFLICT ({key}) DO UPDATE SET {sets};
  END IF;
  RETURN NULL;
END $$
"""


def upgrade() -> None:
    """Add the column, true for every stored pair. A constant default: Postgres rewrites no
    row, and SQLite adds it in place (a batch would copy `pairs` into a new table and drop
    the old one, whose referrers' rows would go with it)."""
    op.add_column(
        "pairs", sa.Column("pair_span", sa.Boolean(), nullable=False, server_default=sa.true())
    )
    if _converting():
        op.add_column(
            _COPY, sa.Column("pair_span", sa.Boolean(), nullable=False, server_default=sa.true())
        )
        _remirror()


def downgrade() -> None:
    """Drop the column in place (SQLite 3.35 and later, as Postgres): no batch copy."""
    op.execute("ALTER TABLE pairs DROP COLUMN pair_span")
    if _converting():
        op.execute(f"ALTER TABLE {_COPY} DROP COLUMN pair_span")
        _remirror()


def _converting() -> bool:
    """Whether a conversion of `pairs` to partitions is under way (Postgres only)."""
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return False
    found = bind.execute(sa.text("SELECT to_regclass(:t)"), {"t": _COPY}).scalar()
    return found is not None


def _remirror() -> None:
    """Rewrite the mirror function with `pairs`' columns now (its trigger stays)."""
    bind = op.get_bind()
    columns = bind.execute(
        sa.text(
            "SELECT attname FROM pg_attribute WHERE attrelid = 'pairs'::regclass "
            "AND attnum > 0 AND NOT attisdropped ORDER BY attnum"
        )
    ).scalars()
    sets = ", ".join(f"{c} = EXCLUDED.{c}" for c in columns if c not in _KEY)
    match = " AND ".join(f"{c} = OLD.{c}" for c in _KEY)
    moved = " OR ".join(f"OLD.{c} IS DISTINCT FROM NEW.{c}" for c in _KEY)
    op.execute(_MIRROR.format(moved=moved, match=match, key=", ".join(_KEY), sets=sets))
