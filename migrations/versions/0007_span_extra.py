"""Spans keep what OTLP carries beyond the flat columns: events, links, scope, trace state.

One nullable JSON column, `spans.extra`, holds the instrumentation scope (name, version,
attributes), the W3C trace state, the trace flags, events (exception stack traces among
them), links and the dropped counts, so that a stored span can be exported again
unchanged. NULL when a span has none of them. Compressed with LZ4 where 0004 uses it.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02 09:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    json_type = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
    op.add_column("spans", sa.Column("extra", json_type, nullable=True))
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        methods = bind.exec_driver_sql(
            "SELECT enumvals FROM pg_settings WHERE name = 'default_toast_compression'"
        ).scalar()
        if methods is not None and "lz4" in methods:
            op.execute("ALTER TABLE spans ALTER COLUMN extra SET COMPRESSION lz4")


def downgrade() -> None:
    with op.batch_alter_table("spans") as batch:
        batch.drop_column("extra")
