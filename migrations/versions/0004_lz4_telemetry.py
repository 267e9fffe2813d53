"""Compress the per-span telemetry columns with LZ4 on Postgres (pglz stays elsewhere).

Every span, request and generation carries 1-2 KB of JSON or text, just past the size at
which Postgres compresses a row. pglz spends more CPU on it than the rest of the insert;
LZ4 (Postgres 14 and later, when built with it, as the Debian and Docker builds are)
compresses as well on these rows for a fraction of the CPU. Rows already stored keep
their pglz values; both stay readable. SQLite, and a Postgres built without LZ4, are
left as they are. A dump of these tables restored on a server without LZ4 needs
`pg_restore --no-toast-compression`.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 09:00:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = {
    "spans": ("attributes", "resource"),
    "requests": ("body", "inputs"),
    "generations": ("prompt", "output", "output_extra"),
}


def upgrade() -> None:
    if _lz4_available():
        _set_compression("lz4")


def downgrade() -> None:
    if _lz4_available():
        _set_compression("default")


def _lz4_available() -> bool:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return False
    methods = bind.exec_driver_sql(
        "SELECT enumvals FROM pg_settings WHERE name = 'default_toast_compression'"
    ).scalar()
    return methods is not None and "lz4" in methods


def _set_compression(method: str) -> None:
    for table, columns in COLUMNS.items():
        changes = ", ".join(f"ALTER COLUMN {column} SET COMPRESSION {method}" for column in columns)
        op.execute(f"ALTER TABLE {table} {changes}")
