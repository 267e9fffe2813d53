"""The schema is built by the migrations, round-trips, and matches the models."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from gate.db import migrate
from gate.db.engine import make_engine
from gate.db.models import Base

TABLES = set(Base.metadata.tables)


def table_names(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return set(inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def assert_round_trip(url: str) -> None:
    migrate.upgrade(url)
    assert table_names(url) == TABLES
    assert migrate.current_revision(url) == migrate.head_revision()
    migrate.downgrade(url, "base")
    assert table_names(url) == set()
    assert migrate.current_revision(url) is None
    migrate.upgrade(url)
    assert table_names(url) == TABLES


@pytest.mark.postgres
def test_upgrade_downgrade_upgrade_on_postgres(empty_pg_url):
    assert_round_trip(empty_pg_url)


def test_upgrade_downgrade_upgrade_on_sqlite(tmp_path):
    assert_round_trip(f"sqlite:///{tmp_path}/round-trip.db")


@pytest.mark.postgres
def test_migrated_postgres_schema_matches_the_models(pg_engine):
    with pg_engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        assert compare_metadata(context, Base.metadata) == []


@pytest.mark.postgres
def test_postgres_gets_jsonb_and_the_gate_indexes(pg_engine):
    inspector = inspect(pg_engine)
    spans = {column["name"]: column for column in inspector.get_columns("spans")}
    assert type(spans["attributes"]["type"]).__name__ == "JSONB"
    indexes = {tuple(ix["column_names"]) for ix in inspector.get_indexes("generations")}
    assert ("rollout_id", "cohort", "started_at") in indexes
    assert ("pair_id",) in indexes
    uniques = {tuple(uq["column_names"]) for uq in inspector.get_unique_constraints("evaluations")}
    assert ("generation_id", "evaluator", "version") in uniques
