"""A pair's arm (issue 40): named by the gateway's spans, stored on the pair, whichever
span lands first; a span without one leaves the pair's arm NULL (one candidate)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from collectors.store import SpanStore
from gate.db.models import Pair
from gate.telemetry import attributes as a
from tests.collectors.factory import gateway_spans


def arms(engine) -> list[str | None]:
    with Session(engine) as session:
        return list(session.scalars(select(Pair.arm)))


def test_the_pair_span_names_the_arm(sqlite_engine, sqlite_ids):
    spans = gateway_spans(sqlite_ids)
    for span in spans[:3]:  # the pair span and both route calls carry it
        span.attributes[a.ARM] = "k4"
    SpanStore(sqlite_engine, pair_deadline_s=300).write(spans)
    assert arms(sqlite_engine) == ["k4"]


def test_a_route_call_landing_first_names_the_arm_of_its_stub(sqlite_engine, sqlite_ids):
    pair_span, baseline, candidate, _ = gateway_spans(sqlite_ids)
    for span in (pair_span, baseline, candidate):
        span.attributes[a.ARM] = "k8"
    store = SpanStore(sqlite_engine, pair_deadline_s=300)
    store.write([candidate])
    assert arms(sqlite_engine) == ["k8"]
    store.write([pair_span, baseline])
    assert arms(sqlite_engine) == ["k8"]


def test_a_rollout_of_one_candidate_names_no_arm(sqlite_engine, sqlite_ids):
    SpanStore(sqlite_engine, pair_deadline_s=300).write(gateway_spans(sqlite_ids))
    assert arms(sqlite_engine) == [None]
