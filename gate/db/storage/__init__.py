"""The storage seam: everything that differs between SQLite and Postgres, behind one protocol.

The implementation is chosen once, from the database URL, when the engine is created
(`for_url`, called by `gate.db.engine.make_engine`); code elsewhere asks the engine, a
connection or a session for it with `of(bind)` and never tests the dialect itself.
`tests/gate/test_storage_seam.py` fails when another module does.

Imports nothing heavy at module level, so settings and the CLI can use `for_url` cheaply.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from sqlalchemy import ColumnElement, Connection, Engine, Table
    from sqlalchemy.dialects.postgresql import Insert as PgInsert
    from sqlalchemy.dialects.sqlite import Insert as SqliteInsert
    from sqlalchemy.orm import Session

    from gate.db.rows import (
        EngineFacts,
        GenerationRow,
        NewGeneration,
        PairRow,
        RequestRow,
        SpanRow,
    )

    Insert = PgInsert | SqliteInsert


class Storage(Protocol):
    """What differs between the embedded SQLite and Postgres."""

    #: One writer at a time (SQLite's database lock): writers need no locks of their own,
    #: commits happen in time order, and a second writer thread would only wait.
    single_writer: bool
    #: The verdict folds a shadow stage's new pairs into stored state in SQL (the slice
    #: queries of `gate/verdicts/` are Postgres SQL); otherwise the verdict replays the stage.
    folds_in_sql: bool
    #: Telemetry tables may be range-partitioned by time (`gate.db.partitions`), so
    #: retention drops whole partitions and the periodic job creates them ahead.
    partitions: bool

    def create_engine(self, url: str, *, echo: bool) -> Engine:
        """Create the SQLAlchemy engine for `url` with this database's connection setup."""

    def snapshot(self, session: Session) -> AbstractContextManager[Session]:
        """A session whose statements all see one snapshot, for a reader that pages through
        several queries (`gate.pairs.export`): rows `session` wrote stay visible to it."""

    def insert(self, table: Table | type[Any]) -> Insert:
        """An INSERT that takes `on_conflict_do_nothing` / `on_conflict_do_update`."""

    def insert_spans(self, conn: Connection, rows: Sequence[SpanRow], received_at: datetime) -> int:
        """Insert spans not stored yet; return how many were new."""

    def insert_requests(self, conn: Connection, rows: Sequence[RequestRow]) -> None:
        """Insert request rows not stored yet."""

    def upsert_pairs(self, conn: Connection, rows: Sequence[PairRow]) -> None:
        """Insert pairs from pair spans, or give a stub the facts only the pair span has."""

    def insert_pair_stubs(self, conn: Connection, rows: Sequence[PairRow]) -> None:
        """Insert placeholder pairs; a control call's stub marks a stored pair as control."""

    def vllm_spans(
        self, conn: Connection, trace_ids: Sequence[str]
    ) -> list[tuple[str, str, dict[str, Any], datetime]]:
        """Return (trace id, parent span id, attributes, start) of stored vLLM spans of the
        traces."""

    def insert_generations(
        self, conn: Connection, rows: Sequence[GenerationRow]
    ) -> list[NewGeneration]:
        """Insert generations not stored yet; return the new ones."""

    def fill_engine_facts(self, conn: Connection, facts: Sequence[EngineFacts]) -> None:
        """Fill stored generations' engine-side fields from vLLM spans, keeping their values."""

    def json_has_any_key(self, column: Any, keys: Sequence[str]) -> ColumnElement[bool]:
        """Whether a JSON object column holds any of `keys` at its top level."""

    def json_without_keys(self, column: Any, keys: Sequence[str]) -> ColumnElement[Any]:
        """The JSON object column without `keys`."""

    def epoch_bucket(self, column: Any, step: int) -> ColumnElement[int]:
        """The start (epoch seconds) of the `step`-second bucket holding a timestamp column."""

    def percentiles(self, value: Any, probs: Sequence[float]) -> ColumnElement[Any] | None:
        """An aggregate of linear-interpolated quantiles of `value` (an array, one per
        probability), or None where the database has none (compute them in Python)."""


_CHOSEN: weakref.WeakKeyDictionary[Engine, Storage] = weakref.WeakKeyDictionary()


def normalise_url(url: str) -> str:
    """Use psycopg 3 for bare `postgresql://` URLs (SQLAlchemy would pick psycopg2)."""
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def is_embedded(url: str) -> bool:
    """Whether `url` names the embedded database (SQLite), which runs in-process."""
    return url.startswith("sqlite")


def for_url(url: str) -> Storage:
    """The storage for a database URL: the one place that tells the databases apart."""
    if is_embedded(url):
        from gate.db.storage.sqlite import SqliteStorage

        return SqliteStorage()
    from gate.db.storage.postgres import PostgresStorage

    return PostgresStorage()


def register(engine: Engine, storage: Storage) -> Engine:
    """Remember the storage chosen for `engine`; return the engine."""
    _CHOSEN[engine] = storage
    return engine


def of(bind: Engine | Connection | Session) -> Storage:
    """The storage of an engine, or of the engine behind a connection or a session."""
    from sqlalchemy import Connection
    from sqlalchemy.orm import Session

    if isinstance(bind, Session):
        bind = bind.get_bind()
    engine = bind.engine if isinstance(bind, Connection) else bind
    storage = _CHOSEN.get(engine)
    if storage is None:  # an engine made without `make_engine` (a tool, a test): once
        url = engine.url.render_as_string(hide_password=False)
        storage = _CHOSEN[engine] = for_url(url)
    return storage
