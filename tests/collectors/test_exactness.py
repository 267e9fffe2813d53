"""Per-token exactness fields from the gateway's span to `generations.exactness` and the
pair export: through a real `specgate serve`, the real collector and Postgres, and the
embedded store; malformed fields are dropped and counted, never a failed batch."""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import openai
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from prometheus_client import CollectorRegistry
from sqlalchemy import select, text
from sqlalchemy.orm import Session, sessionmaker

from collectors.app import create_app
from collectors.normalise import exactness_of
from gate.db.engine import make_engine
from gate.db.enums import Cohort, PairState
from gate.db.models import Generation, Pair
from gate.engines.sim import SimProfile, create_sim_app
from gate.exactness import exactness_fields
from gate.exactness_fit import BINS, TokenFit
from gate.pairs.export import pair_records
from gate.rollouts import service
from gate.rollouts.states import Action
from gate.settings import load_settings
from gate.telemetry import attributes as a
from tests import factories
from tests.collectors.factory import Ids, route_attributes
from tests.collectors.sdk import RESOURCE
from tests.gate.api.test_processes import specgate_serve
from tests.servers import serving
from tests.waits import wait_until

FIT = TokenFit(3, (1.5, 0.5, 1.0, *([0.0] * (BINS - 3))), cut=1, skipped=2).as_dict()
# No control share: only the candidate is asked for alternatives.
POLICY = {"stages": [100], "guardrails": {"exactness": {"control_share": 0.0}}}
MESSAGES = [{"role": "user", "content": "Proofread: the cat sat on teh mat."}]


def test_a_well_formed_attribute_is_stored_as_the_fields():
    assert exactness_of(json.dumps(FIT)) == FIT
    assert exactness_of(None) is None


@pytest.mark.parametrize(
    "attribute",
    [
        "not json",
        json.dumps({"n": 3}),  # no bins
        json.dumps({**FIT, "bins": FIT["bins"][:-1]}),
        json.dumps({**FIT, "n": 4}),  # bins that do not sum to the tokens
        json.dumps({**FIT, "n": 3.5}),
        json.dumps({**FIT, "cut": -1}),
        json.dumps({**FIT, "skipped": True}),
        json.dumps({**FIT, "bins": [math.nan] * BINS}),
        json.dumps({**FIT, "bins": ["x"] * BINS}),
        json.dumps([FIT]),
    ],
)
def test_a_malformed_attribute_is_left_out(attribute):
    assert exactness_of(attribute) is None


def record(ids: Ids, exactness: dict[str, str]) -> list[Any]:
    """One sampled request's route-call spans, each cohort with its exactness attribute."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=RESOURCE)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("specgate.gateway")
    pair_id, request_id = uuid.uuid4(), uuid.uuid4()
    for cohort, value in exactness.items():
        attributes = {**route_attributes(ids, cohort, pair_id, request_id), a.EXACTNESS: value}
        tracer.start_span("chat llama", kind=SpanKind.CLIENT, attributes=attributes).end()
    provider.shutdown()
    return list(memory.get_finished_spans())


@pytest.mark.postgres
def test_the_collector_stores_the_fields_and_drops_a_malformed_one(
    pg_url, pg_engine, pg_ids, tmp_path
):
    registry = CollectorRegistry()
    settings = load_settings(database_url=pg_url, home=tmp_path)
    app = create_app(settings, load_settings(collector_flush_interval_s=0.05), registry=registry)
    spans = record(pg_ids, {"candidate": json.dumps(FIT), "baseline": '{"n": 1, "bins": []}'})
    with serving(app) as base:
        exporter = OTLPSpanExporter(endpoint=f"{base}/v1/traces")
        assert exporter.export(spans) is SpanExportResult.SUCCESS
        assert app.state.pipeline.writer.flush(10)
        exporter.shutdown()
    with Session(pg_engine) as session:
        stored = {g.cohort: g.exactness for g in session.scalars(select(Generation))}
    assert stored == {Cohort.CANDIDATE: FIT, Cohort.BASELINE: None}
    value = registry.get_sample_value
    assert value("specgate_collector_fields_dropped_total") == 1
    assert value("specgate_collector_normalise_failed_total") == 0


@contextmanager
def routes() -> Iterator[tuple[str, str]]:
    with ExitStack() as stack:
        base = stack.enter_context(serving(create_sim_app(SimProfile(tokens=8))))
        cand = stack.enter_context(
            serving(create_sim_app(SimProfile(tokens=8, spec_tokens=4, acceptance=0.6)))
        )
        yield base, cand


def start_rollout(sessions: sessionmaker[Session], base: str, cand: str) -> int:
    with sessions() as db, db.begin():
        rollout = factories.rollout(
            db,
            name="smol",
            base_url=base + "/v1",
            candidate_url=cand + "/v1",
            sample_rate=1.0,
            policy=POLICY,
        )
        service.transition(db, rollout_id=rollout.id, action=Action.START, actor="t", reason="t")
        return rollout.id


def send(gateway: str, stream: bool) -> None:
    client = openai.OpenAI(base_url=gateway + "/v1", api_key="x", max_retries=0)
    answer = client.chat.completions.create(
        model="smol", messages=MESSAGES, temperature=0.8, max_tokens=8, stream=stream
    )
    list(answer) if stream else None


def expected(base: str) -> dict[str, Any]:
    """The public function applied to what the route answers the candidate's body."""
    body = {"model": "sim", "messages": MESSAGES, "max_tokens": 8, "temperature": 0.8}
    client = openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0)
    answer = client.chat.completions.create(**body, logprobs=True, top_logprobs=20)
    logprobs = answer.choices[0].logprobs.model_dump()
    fit = exactness_fields(logprobs, temperature=0.8, mode="raw", top_logprobs=20)
    assert fit is not None and fit.tokens == 8
    return fit.as_dict()


def closed(sessions: sessionmaker[Session], count: int) -> None:
    assert wait_until(lambda: len(generations(sessions)) == 2 * count, timeout=30)
    with sessions() as db, db.begin():
        for pair in db.scalars(select(Pair)):
            pair.state = PairState.COMPLETE


def generations(sessions: sessionmaker[Session]) -> list[Generation]:
    with sessions() as db:
        return list(db.scalars(select(Generation)))


def exported(sessions: sessionmaker[Session], rollout_id: int) -> list[dict[str, Any]]:
    with sessions() as db:
        return list(pair_records(db, rollout_id=rollout_id, stage=0))


def check_landed(sessions: sessionmaker[Session], rollout_id: int, want: dict[str, Any]) -> None:
    """Two pairs (JSON and streamed): the candidate's fields stored and exported."""

    assert wait_until(lambda: len(generations(sessions)) == 4, timeout=30)
    landed = generations(sessions)
    by_cohort = {c: [g.exactness for g in landed if g.cohort is c] for c in Cohort}
    assert by_cohort[Cohort.CANDIDATE] == [want, want]
    assert by_cohort[Cohort.BASELINE] == [None, None]
    assert wait_until(lambda: len(exported(sessions, rollout_id)) == 2)
    records = exported(sessions, rollout_id)
    with sessions() as db:
        nulls = db.scalar(text("SELECT count(*) FROM generations WHERE exactness IS NULL"))
    assert [r["candidate"]["exactness"] for r in records] == [want, want]
    assert [r["baseline"]["exactness"] for r in records] == [None, None]
    assert nulls == 2  # SQL NULL, not a JSON null: the fold can tell "none" in SQL


@pytest.mark.postgres
def test_gateway_spans_land_in_postgres_through_the_collector_and_export(
    pg_url, pg_committing, tmp_path
):
    collector = create_app(
        load_settings(database_url=pg_url, home=tmp_path / "c"),
        load_settings(collector_flush_interval_s=0.05),
    )
    with ExitStack() as stack:
        base, cand = stack.enter_context(routes())
        rollout_id = start_rollout(pg_committing, base, cand)
        sink = stack.enter_context(serving(collector)) + "/v1/traces"
        gateway = stack.enter_context(
            specgate_serve(
                pg_url, otlp_endpoint=sink, SPECGATE_HOME=str(tmp_path), SPECGATE_CONTROL_RATE="0"
            )
        )
        for stream in (False, True):
            send(gateway, stream)
        closed(pg_committing, 2)  # the worker's part: pairs close once both calls landed
        check_landed(pg_committing, rollout_id, expected(base))


def test_the_embedded_gateway_stores_the_fields_in_sqlite(sqlite_url, tmp_path):
    engine = make_engine(sqlite_url)
    sessions = sessionmaker(engine, expire_on_commit=False)
    with ExitStack() as stack:
        base, cand = stack.enter_context(routes())
        rollout_id = start_rollout(sessions, base, cand)
        gateway = stack.enter_context(
            specgate_serve(
                sqlite_url, embedded=True, SPECGATE_HOME=str(tmp_path), SPECGATE_CONTROL_RATE="0"
            )
        )
        for stream in (False, True):
            send(gateway, stream)
        check_landed(sessions, rollout_id, expected(base))
    engine.dispose()
