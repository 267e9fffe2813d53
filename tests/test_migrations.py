"""The schema is built by the migrations, round-trips, and matches the models."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text
from sqlalchemy.orm import Session

from gate.db import migrate
from gate.db.engine import make_engine
from gate.db.enums import Cohort
from gate.db.models import Base, Pair
from tests import factories

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


def test_pairs_closed_before_the_fold_revision_are_stamped_ready(tmp_path):
    url = f"sqlite:///{tmp_path}/stamps.db"
    migrate.upgrade(url, "0001")
    engine = make_engine(url)
    insert = text(
        "INSERT INTO routes (name, base_url, model, role, spec_config, created_at) "
        "VALUES ('b', 'http://b', 'm', 'baseline', '{}', '2025-05-01 00:00:00');"
    )
    rollout = text(
        "INSERT INTO rollouts (name, alias, baseline_route_id, candidate_route_id, mode, "
        "sample_rate, stage, state, policy, version, created_at, updated_at) VALUES "
        "('r', 'r', 1, 1, 'shadow', 0.1, 0, 'running', '{}', 1, '2025-05-01', '2025-05-01')"
    )
    pairs = text(
        "INSERT INTO pairs (id, rollout_id, stage, state, is_control, segment, created_at, "
        "deadline, completed_at) VALUES "
        "('a', 1, 0, 'complete', 0, 'chat', '2025-05-01 00:00:00', '2025-05-01 00:05:00', "
        "'2025-05-01 00:00:03'), "
        "('b', 1, 0, 'open', 0, 'chat', '2025-05-01 00:00:01', '2025-05-01 00:05:01', NULL)"
    )
    try:
        with engine.begin() as connection:
            for statement in (insert, rollout, pairs):
                connection.execute(statement)
        migrate.upgrade(url)
        with engine.connect() as connection:
            rows = connection.execute(text("SELECT id, evaluated_at FROM pairs ORDER BY id"))
            assert [tuple(r) for r in rows] == [("a", "2025-05-01 00:00:03"), ("b", None)]
    finally:
        engine.dispose()


def test_sampled_answers_kept_before_the_distinct_2_revision_get_theirs(tmp_path):
    url = f"sqlite:///{tmp_path}/distinct.db"
    migrate.upgrade(url, "0016")
    engine = make_engine(url)
    generations = text(
        "INSERT INTO generations (cohort, segment, stream, status, temperature, output, "
        "output_truncated, started_at) VALUES "
        "('baseline', 'chat', 0, 'ok', 0.8, 'a b a b', NULL, '2025-05-01'), "
        "('baseline', 'chat', 0, 'ok', 0.8, 'a b a b', 1, '2025-05-01'), "
        "('baseline', 'chat', 0, 'ok', NULL, 'a b a b', NULL, '2025-05-01'), "
        "('baseline', 'chat', 0, 'ok', 0.8, NULL, NULL, '2025-05-01')"
    )
    try:
        with engine.begin() as connection:
            connection.execute(generations)
        migrate.upgrade(url)
        with engine.connect() as connection:
            rows = connection.execute(text("SELECT distinct_2 FROM generations ORDER BY id"))
            # Distinct bigrams (a b), (b a) of three: only the whole, sampled answer.
            assert [r[0] for r in rows] == [pytest.approx(2 / 3), None, None, None]
    finally:
        engine.dispose()


def check_parity_backfill(url: str, a: str, g: str, false: str) -> None:
    migrate.upgrade(url, "0015")
    engine = make_engine(url)
    rows = [
        text(
            "INSERT INTO routes (name, base_url, model, role, spec_config, created_at) "
            "VALUES ('b', 'http://b', 'm', 'baseline', '{}', '2025-05-01 00:00:00');"
        ),
        text(
            "INSERT INTO rollouts (name, alias, baseline_route_id, candidate_route_id, mode, "
            "sample_rate, stage, state, policy, version, created_at, updated_at) VALUES "
            "('r', 'r', 1, 1, 'shadow', 0.1, 0, 'running', '{}', 1, '2025-05-01', '2025-05-01')"
        ),
        text(
            "INSERT INTO pairs (id, rollout_id, stage, state, is_control, segment, created_at, "
            f"deadline, evaluated_at) VALUES ('{a}', 1, 0, 'complete', {false}, 'chat', "
            f"'2025-05-01', '2025-05-01', '2025-05-01'), ('{g}', 1, 0, 'complete', {false}, "
            "'chat', '2025-05-01', '2025-05-01', '2025-05-01')"
        ),
        text(
            "INSERT INTO generations (pair_id, cohort, segment, stream, status, temperature, "
            "top_p, max_tokens, finish_reason, output_tokens, output, started_at) VALUES "
            f"('{a}', 'baseline', 'chat', {false}, 'ok', 0.8, 1.0, 64, 'stop', 4, 'a b a b', "
            f"'2025-05-01'), ('{a}', 'candidate', 'chat', {false}, 'ok', 0.8, 1.0, 64, 'stop', "
            f"3, 'a b c', '2025-05-01'), ('{g}', 'baseline', 'chat', {false}, 'ok', NULL, NULL, "
            f"64, 'stop', 4, 'a', '2025-05-01'), ('{g}', 'candidate', 'chat', {false}, 'ok', "
            "NULL, NULL, 64, 'stop', 3, 'a', '2025-05-01')"
        ),
    ]
    try:
        with engine.begin() as connection:
            for statement in rows:
                connection.execute(statement)
        migrate.upgrade(url)
        with engine.connect() as connection:
            got = dict(connection.execute(text("SELECT id, parity FROM pairs")).all())
    finally:
        engine.dispose()
    stored = {str(k).replace("-", ""): v for k, v in got.items()}
    d = stored[a.replace("-", "")]
    d = json.loads(d) if isinstance(d, str) else d
    assert d == {"length": -1.0, "distinct_2": pytest.approx(1 / 3)}
    assert stored[g.replace("-", "")] is None  # greedy: neither side carries settings


def test_pairs_stamped_before_the_parity_fold_get_their_differences(tmp_path):
    # Stamped before 0016, a pair had no stored d: the refolded state (FOLD_VERSION 3)
    # would leave it out of the parity cells and the warm-up's scale, which replay keeps.
    check_parity_backfill(f"sqlite:///{tmp_path}/parity.db", "a", "g", "0")


@pytest.mark.postgres
def test_pairs_stamped_before_the_parity_fold_get_their_differences_on_postgres(
    empty_pg_url,
):
    a, g = "7f9c0000-0000-4000-8000-00000000000a", "7f9c0000-0000-4000-8000-00000000000b"
    check_parity_backfill(empty_pg_url, a, g, "false")


def check_arm_folds_keep_the_old_rows(url: str) -> None:
    """Fold states stored before 0030 become the single-candidate states (arm ''), and a
    downgrade keeps those and drops the arms' (review2)."""
    migrate.upgrade(url, "0028")
    engine = make_engine(url)
    try:
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO routes (name, base_url, model, role, spec_config, created_at) "
                    "VALUES ('b', 'http://b', 'm', 'baseline', '{}', '2025-05-01 00:00:00')"
                )
            )
            connection.execute(
                text(
                    "INSERT INTO rollouts (name, alias, baseline_route_id, candidate_route_id, "
                    "mode, sample_rate, stage, state, policy, version, created_at, updated_at) "
                    "VALUES "
                    "('r', 'r', 1, 1, 'shadow', 0.1, 0, 'running', '{}', 1, '2025-05-01', "
                    "'2025-05-01')"
                )
            )
            connection.execute(text(
                "INSERT INTO gate_folds (rollout_id, stage, policy_key, pairs, warm_pairs, "
                "segments, evaluators, collapse, updated_at) VALUES "
                "(1, 0, 'k', 7, 0, '{}', '{}', '{}', '2025-05-01'), "
                "(1, 1, 'k', 3, 0, '{}', '{}', '{}', '2025-05-01')"
            ))  # fmt: skip
        migrate.upgrade(url)
        with engine.begin() as connection:
            got = connection.execute(
                text("SELECT stage, arm, pairs, arm_sums FROM gate_folds ORDER BY stage")
            ).all()
            assert [tuple(r) for r in got] == [(0, "", 7, None), (1, "", 3, None)]
            connection.execute(text(
                "INSERT INTO gate_folds (rollout_id, stage, arm, policy_key, pairs, warm_pairs, "
                "segments, evaluators, collapse, updated_at) VALUES "
                "(1, 0, 'a', 'k', 2, 0, '{}', '{}', '{}', '2025-05-01'), "
                "(1, 0, 'b', 'k', 2, 0, '{}', '{}', '{}', '2025-05-01')"
            ))  # fmt: skip
        migrate.downgrade(url, "0028")
        with engine.connect() as connection:
            got = connection.execute(
                text("SELECT stage, pairs FROM gate_folds ORDER BY stage")
            ).all()
        assert [tuple(r) for r in got] == [(0, 7), (1, 3)]
        migrate.upgrade(url)
    finally:
        engine.dispose()


def test_fold_states_stored_before_the_arm_key_keep_their_meaning(tmp_path):
    check_arm_folds_keep_the_old_rows(f"sqlite:///{tmp_path}/arm-folds.db")


@pytest.mark.postgres
def test_fold_states_stored_before_the_arm_key_keep_their_meaning_on_postgres(empty_pg_url):
    check_arm_folds_keep_the_old_rows(empty_pg_url)


def check_evaluations_take_their_generations_start(url: str, *, stopped: bool = False) -> None:
    """0032 fills `evaluations.generation_started_at` from each evaluation's generation (the
    key `specgate db partition evaluations` partitions by); every row survives. `stopped`:
    a first run stopped in its backfill (which commits as it goes) is taken up again."""
    migrate.upgrade(url, "0030")
    engine = make_engine(url)
    try:
        with Session(engine) as session:
            # The pair by Core, with 0030's columns: the model's later ones are not there yet.
            pair = Pair(id=uuid.uuid4(), rollout_id=factories.rollout(session).id)
            session.execute(
                Pair.__table__.insert().values(
                    id=pair.id, rollout_id=pair.rollout_id, deadline=datetime.now(UTC)
                )
            )
            calls = [
                factories.generation(session, pair, c) for c in (Cohort.BASELINE, Cohort.CANDIDATE)
            ]
            calls[1].started_at = calls[0].started_at + timedelta(seconds=3)
            session.commit()
            want = sorted((g.id, g.started_at, name) for g in calls for name in ("a", "b"))
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO evaluations (generation_id, evaluator, version, details, "
                    "created_at) VALUES (:g, :e, '1', '{}', :t)"
                ),
                # Written a day after its generation started: a backfill from the evaluation's
                # own `created_at` (the orphans' fallback) cannot pass for one from its
                # generation.
                [
                    {"g": g, "e": name, "t": started + timedelta(days=1)}
                    for g, started, name in want
                ],
            )
        if stopped:
            with engine.begin() as connection:
                for statement in STOPPED_0032:
                    connection.execute(text(statement))
        migrate.upgrade(url)
        with engine.connect() as connection:
            got = connection.execute(
                text("SELECT generation_id, generation_started_at, evaluator FROM evaluations")
            ).all()
        assert sorted((g, _aware(t), e) for g, t, e in got) == want
    finally:
        engine.dispose()


# What a run of 0032 stopped after its first backfill batch leaves behind.
STOPPED_0032 = (
    "ALTER TABLE evaluations ADD COLUMN generation_started_at timestamp with time zone",
    "ALTER TABLE evaluations ADD CONSTRAINT ck_evaluations_generation_started_at_set "
    "CHECK (generation_started_at IS NOT NULL) NOT VALID",
    "UPDATE evaluations e SET generation_started_at = g.started_at FROM generations g "
    "WHERE g.id = e.generation_id AND e.evaluator = 'a'",
)


def _aware(moment: datetime | str) -> datetime:
    """A stored time as an aware UTC datetime (SQLite gives back naive UTC text)."""
    found = datetime.fromisoformat(moment) if isinstance(moment, str) else moment
    return found if found.tzinfo else found.replace(tzinfo=UTC)


@pytest.mark.postgres
def test_evaluations_take_their_generations_start_on_postgres(empty_pg_url: str) -> None:
    check_evaluations_take_their_generations_start(empty_pg_url)


@pytest.mark.postgres
def test_a_stopped_evaluations_backfill_is_taken_up_again(empty_pg_url: str) -> None:
    check_evaluations_take_their_generations_start(empty_pg_url, stopped=True)


def test_evaluations_take_their_generations_start_on_sqlite(tmp_path) -> None:
    check_evaluations_take_their_generations_start(f"sqlite:///{tmp_path}/evaluations.db")


@pytest.mark.postgres
def test_pair_span_reaches_a_pairs_conversion_stopped_midway(empty_pg_url: str) -> None:
    """`specgate db partition pairs` stopped after its first step (the partitioned copy
    built, the mirror trigger on `pairs`), then the upgrade to 0037: the mirror copies
    `NEW.*` by position, so a column `pairs` alone gains made every insert into `pairs` fail
    (the collector could store no pair). 0037 gives the copy the column and the mirror
    its update, so a pair span after its stub is mirrored, and the conversion completes."""
    from gate.db import online_partition
    from gate.db.storage import of as storage_of
    from tests.collectors.factory import make_rollout
    from tests.gate.db.test_partition_pairs import pair

    migrate.upgrade(empty_pg_url, "0036")
    engine = make_engine(empty_pg_url)
    try:
        with Session(engine) as session, session.begin():
            rollout_id = make_rollout(session).rollout
        with engine.begin() as conn:
            online_partition._prepare(conn, "pairs", 86_400, lambda _line: None)
        migrate.upgrade(empty_pg_url)
        migrate.downgrade(empty_pg_url, "0036")  # both ways, the conversion still stopped
        migrate.upgrade(empty_pg_url)
        pair_id = uuid.uuid4()
        stub, full = pair(rollout_id, pair_id), pair(rollout_id, pair_id)
        stub["pair_span"] = False
        with engine.begin() as conn:
            storage_of(engine).insert_pair_stubs(conn, [stub])
        with engine.begin() as conn:
            storage_of(engine).upsert_pairs(conn, [full])
        online_partition.convert(engine, "pairs", period=86_400, echo=lambda _line: None)
        with engine.connect() as conn:
            got = conn.execute(
                text("SELECT pair_span, tableoid::regclass::text FROM pairs WHERE id = :i"),
                {"i": pair_id},
            ).all()
        assert [g[0] for g in got] == [True]
        migrate.downgrade(empty_pg_url, "0036")
    finally:
        engine.dispose()
