"""Done-when: gateway-shaped spans become one request, one pair and two generations."""

from __future__ import annotations

import math
import uuid
from datetime import timedelta

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from collectors.normalise import GENERATION_HELD, REQUEST_CONTENT, ROUTE_CONTENT, normalise
from collectors.spans import to_unix_nano
from collectors.store import SpanStore
from gate.db.models import Generation, Pair, RequestRecord, SpanRecord
from gate.pairs.service import complete_ready, sweep_deadlines
from gate.telemetry import attributes as a
from tests.collectors.factory import START, Ids, gateway_spans


def stored(engine: Engine) -> tuple[list[RequestRecord], list[Pair], dict[str, Generation]]:
    with Session(engine) as session:
        requests = list(session.scalars(select(RequestRecord)))
        pairs = list(session.scalars(select(Pair)))
        generations = {g.cohort.value: g for g in session.scalars(select(Generation))}
    return requests, pairs, generations


def as_attribute(stored: object) -> object:
    """A column's value as the gateway wrote it in the span (UUIDs and enums as strings)."""
    return str(stored) if isinstance(stored, uuid.UUID) else getattr(stored, "value", stored)


def check_one_sampled_request(engine: Engine, ids: Ids) -> None:
    store = SpanStore(engine, pair_deadline_s=300)
    pair_span, _, candidate, _ = spans = gateway_spans(ids)
    landed = store.write(spans)
    requests, pairs, generations = stored(engine)

    assert len(requests) == 1 and len(pairs) == 1 and set(generations) == {"baseline", "candidate"}
    request, pair = requests[0], pairs[0]
    pair_id = uuid.UUID(pair_span.attributes[a.PAIR_ID])
    assert pair.id == pair_id and pair.request_id == request.id and pair.rollout_id == ids.rollout
    assert pair.state.value == "open" and pair.segment == "code" and not pair.is_control
    assert pair.deadline == START + timedelta(seconds=60)
    assert request.body == {"messages": [{"role": "user", "content": "fix"}]}
    assert request.inputs == {"tests": ["assert f() == 1"]} and request.tenant == "acme"
    assert (request.inflight_baseline, request.inflight_candidate) == (3, 1)
    assert request.gateway_replica == "gw-1:42:0a0b0c0d"
    assert (request.episode, request.episode_source, pair.episode) == ("conv-7", "header", "conv-7")

    base, cand = generations["baseline"], generations["candidate"]
    assert (base.route_id, cand.route_id) == (ids.baseline_route, ids.candidate_route)
    assert base.pair_id == cand.pair_id == pair_id and base.request_id == request.id
    assert (base.ttft_s, base.tpot_s, base.e2e_s) == (0.1, 0.02, 2.1)
    assert (cand.ttft_s, cand.tpot_s, cand.e2e_s) == (0.12, 0.011, 1.2)
    assert (cand.spec_drafts, cand.spec_draft_tokens, cand.spec_accepted_tokens) == (40, 200, 60)
    assert base.spec_drafts is None and base.status.value == "ok" and base.stream
    assert (cand.logprob_tokens, cand.logprob_sum) == (100, -73.5) and base.logprob_sum is None
    assert (cand.model, cand.temperature, cand.max_tokens, cand.seed) == ("llama-3-8b", 0.0, 128, 7)
    assert (cand.finish_reason, cand.input_tokens, cand.output_tokens) == ("stop", 42, 100)
    assert cand.prompt == "fix this code" and cand.output == "answer from candidate"
    assert cand.output_extra == {"tool_calls": []} and cand.response_id == "chatcmpl-candidate"
    assert (cand.trace_id, cand.span_id) == (candidate.trace_id, candidate.span_id)
    # vLLM's llm_request span is a child of the candidate call: its engine facts join there.
    assert cand.queue_s == 0.004 and base.queue_s is None
    # Engine-reported timings keep their own columns, apart from the gateway's.
    assert (cand.engine_ttft_s, cand.engine_tpot_s, cand.ttft_s) == (0.09, 0.01, 0.12)
    assert base.engine_ttft_s is None and base.engine_tpot_s is None
    assert cand.started_at == candidate.start_time and base.segment == "code"
    assert sorted(landed.generation_ids) == sorted([base.id, cand.id])
    assert landed.pair_ids == [pair_id] and landed.spans_new == 4

    # Nothing is stored twice: a span keeps only what its rows do not hold, and the two
    # together give back every attribute it came with.
    with Session(engine) as session:
        kept = {r.span_id: r.attributes for r in session.scalars(select(SpanRecord))}
    pair_attributes = pair_span.attributes.items()
    assert kept[pair_span.span_id] == {k: v for k, v in pair_attributes if k not in REQUEST_CONTENT}
    route_attributes = candidate.attributes.items()
    assert kept[candidate.span_id] == {
        k: v for k, v in route_attributes if k not in GENERATION_HELD and k not in ROUTE_CONTENT
    }
    for key, column in GENERATION_HELD.items():  # NULL exactly where the span lacked it
        assert as_attribute(getattr(cand, column)) == candidate.attributes.get(key), key
    assert kept[spans[3].span_id] == spans[3].attributes  # vLLM's span is not normalised
    assert a.PROMPT in candidate.attributes  # the caller's rows are not modified

    again = store.write(spans)  # a duplicate delivery changes nothing
    assert again.spans_new == 0 and again.spans_duplicate == 4 and again.generation_ids == []
    assert [len(rows) for rows in stored(engine)] == [1, 1, 2]


@pytest.mark.postgres
def test_a_gateway_span_set_becomes_rows_on_postgres(pg_engine, pg_ids):
    check_one_sampled_request(pg_engine, pg_ids)


def test_a_gateway_span_set_becomes_rows_on_sqlite(sqlite_engine, sqlite_ids):
    check_one_sampled_request(sqlite_engine, sqlite_ids)


def queue_of(engine: Engine) -> dict[str, float | None]:
    _, _, generations = stored(engine)
    return {cohort: g.queue_s for cohort, g in generations.items()}


def check_vllm_facts_join(engine: Engine, ids: Ids, vllm_first: bool) -> None:
    store = SpanStore(engine, pair_deadline_s=300)
    spans = gateway_spans(ids)
    vllm, gateway = spans[3:], spans[:3]
    for batch in (vllm, gateway) if vllm_first else (gateway, vllm):
        store.write(batch)
    assert queue_of(engine) == {"baseline": None, "candidate": 0.004}
    for batch in (vllm, gateway):  # a retried delivery joins again, to the same values
        store.write(batch)
    assert queue_of(engine) == {"baseline": None, "candidate": 0.004}


@pytest.mark.postgres
@pytest.mark.parametrize("vllm_first", [True, False], ids=["vllm-first", "gateway-first"])
def test_vllm_facts_join_whichever_span_arrives_first(pg_engine, pg_ids, vllm_first):
    check_vllm_facts_join(pg_engine, pg_ids, vllm_first)


@pytest.mark.parametrize("vllm_first", [True, False], ids=["vllm-first", "gateway-first"])
def test_vllm_facts_join_whichever_span_arrives_first_on_sqlite(
    sqlite_engine, sqlite_ids, vllm_first
):
    check_vllm_facts_join(sqlite_engine, sqlite_ids, vllm_first)


@pytest.mark.postgres
def test_a_stored_vllm_span_breaking_the_contract_does_not_fail_its_generation(pg_engine, pg_ids):
    store = SpanStore(pg_engine, pair_deadline_s=300)
    spans = gateway_spans(pg_ids)
    spans[3].attributes[a.VLLM_QUEUE] = "soon"
    assert store.write(spans[3:]).normalise_skipped == 1  # kept raw, and counted
    landed = store.write(spans[:3])
    assert len(landed.generation_ids) == 2 and landed.normalise_skipped == 0
    assert queue_of(pg_engine) == {"baseline": None, "candidate": None}


@pytest.mark.postgres
def test_engine_facts_do_not_overwrite_what_the_gateway_measured(pg_engine, pg_ids):
    spans = gateway_spans(pg_ids)
    spans[2].attributes[a.QUEUE_S] = 0.5
    SpanStore(pg_engine, pair_deadline_s=300).write(spans)
    assert queue_of(pg_engine)["candidate"] == 0.5


@pytest.mark.postgres
def test_a_generation_may_land_before_its_pair_span(pg_engine, pg_ids):
    store = SpanStore(pg_engine, pair_deadline_s=300)
    pair_span, baseline, candidate, _ = gateway_spans(pg_ids)
    early = store.write([baseline])
    _, pairs, _ = stored(pg_engine)
    assert len(pairs) == 1 and pairs[0].request_id is None  # a stub with the route's facts
    assert pairs[0].deadline == baseline.start_time + timedelta(seconds=300)
    assert pairs[0].episode is None
    store.write([pair_span, candidate])
    requests, pairs, generations = stored(pg_engine)
    assert pairs[0].request_id == requests[0].id and pairs[0].episode == "conv-7"
    assert pairs[0].deadline == START + timedelta(seconds=60)
    assert len(generations) == 2 and early.pair_ids == [pairs[0].id]


@pytest.mark.postgres
def test_a_span_breaking_the_contract_is_kept_raw_and_counted(pg_engine, pg_ids):
    spans = gateway_spans(pg_ids)
    spans[1].attributes[a.COHORT] = "shadow-ish"
    landed = SpanStore(pg_engine, pair_deadline_s=300).write(spans)
    assert landed.normalise_skipped == 1 and landed.spans_new == 4
    _, _, generations = stored(pg_engine)
    assert set(generations) == {"candidate"}
    with Session(pg_engine) as session:
        kept = session.get(SpanRecord, (spans[1].trace_id, spans[1].span_id))
        assert kept is not None and kept.attributes[a.PROMPT] == "fix this code"  # no row holds it


def test_a_span_keeps_every_value_its_row_does_not_give_back_exactly(sqlite_ids):
    _, baseline, candidate, _ = gateway_spans(sqlite_ids)
    attrs = candidate.attributes
    attrs[a.ROUTE_FINGERPRINT] = "f" * 80  # the column keeps 64 characters
    attrs[a.PAIR_ID] = attrs[a.PAIR_ID].upper()  # the same UUID, written another way
    attrs[a.TTFT_S] = 1  # an int: the column holds 1.0
    attrs[a.GEN_AI_REQUEST_TEMPERATURE] = -0.0  # SQLite would give back 0.0
    attrs[a.GEN_AI_REQUEST_SEED] = None  # an empty value: the column's NULL would not say so
    baseline.attributes[a.TPOT_S] = float("nan")  # NaN is not NaN
    rows = normalise([baseline, candidate], pair_deadline_s=30)
    changed = (a.ROUTE_FINGERPRINT, a.PAIR_ID, a.TTFT_S, a.GEN_AI_REQUEST_TEMPERATURE)
    stored = rows.spans[1].attributes
    assert {key: stored[key] for key in changed} == {key: attrs[key] for key in changed}
    assert math.copysign(1.0, stored[a.GEN_AI_REQUEST_TEMPERATURE]) == -1.0
    assert a.GEN_AI_REQUEST_SEED in stored and stored[a.GEN_AI_REQUEST_SEED] is None
    assert a.TPOT_S in rows.spans[0].attributes and a.TTFT_S not in rows.spans[0].attributes
    assert a.TPOT_S not in stored  # still held exactly, so still dropped
    # A default or a fallback could fill these columns: the span keeps them.
    assert {a.STATUS, a.STREAM, a.SEGMENT, a.E2E_S, a.GEN_AI_USAGE_OUTPUT_TOKENS} <= set(stored)


@pytest.mark.parametrize(
    ("key", "value"),
    [(a.PAIR_DEADLINE_S, float("nan")), (a.PAIR_DEADLINE_S, 1e300), (a.ROLLOUT_STAGE, math.inf)],
    ids=["nan-deadline", "deadline-past-datetime", "infinite-stage"],
)
def test_an_out_of_range_number_skips_its_span_not_the_batch(sqlite_ids, key, value):
    pair_span, baseline, _, _ = gateway_spans(sqlite_ids)
    pair_span.attributes[key] = value
    rows = normalise([pair_span, baseline], pair_deadline_s=30)
    assert rows.skipped == 1 and rows.pairs == [] and len(rows.generations) == 1
    assert rows.spans[0] is pair_span  # kept whole


def test_control_pairs_and_error_calls_are_normalised(sqlite_ids):
    spans = gateway_spans(sqlite_ids)
    spans[2].attributes[a.COHORT] = "control"
    spans[2].attributes.pop(a.STATUS)
    spans[2].status_code, spans[2].status_message = 2, "upstream 500"
    spans[2].attributes.pop(a.E2E_S)
    rows = normalise(spans[1:3], pair_deadline_s=30)
    control = rows.generations[1]
    assert control["status"] == "error" and control["error"] == "upstream 500"
    assert control["e2e_s"] == 1.2  # the span's own duration when the gateway gave none
    assert [stub["is_control"] for stub in rows.pair_stubs] == [True]


def test_a_stub_takes_the_pair_s_start_from_its_call_span(sqlite_ids):
    pair_span, baseline, candidate, _ = gateway_spans(sqlite_ids)
    assert baseline.start_time != pair_span.start_time
    started = to_unix_nano(pair_span.start_time)
    baseline.attributes[a.PAIR_STARTED_NS] = candidate.attributes[a.PAIR_STARTED_NS] = started
    stubs = normalise([baseline, candidate], pair_deadline_s=30).pair_stubs
    (pair,) = normalise([pair_span], pair_deadline_s=30).pairs
    # The same (id, created_at): a partitioned `pairs` merges stub and pair on that key.
    assert [(s["id"], s["created_at"]) for s in stubs] == [(pair["id"], pair["created_at"])]
    assert stubs[0]["deadline"] == pair_span.start_time + timedelta(seconds=30)
    # A call span of a gateway that does not stamp it: the call's own start, as before.
    baseline.attributes.pop(a.PAIR_STARTED_NS)
    (stub,) = normalise([baseline], pair_deadline_s=30).pair_stubs
    assert stub["created_at"] == baseline.start_time


@pytest.mark.postgres
def test_a_control_call_landing_later_marks_its_stub_pair(pg_engine, pg_ids):
    store = SpanStore(pg_engine, pair_deadline_s=300)
    _, baseline, control, _ = gateway_spans(pg_ids)
    control.attributes[a.COHORT] = "control"
    store.write([baseline])
    assert not stored(pg_engine)[1][0].is_control
    store.write([control])
    assert stored(pg_engine)[1][0].is_control


@pytest.mark.postgres
def test_a_pair_span_naming_no_request_keeps_its_body(pg_engine, pg_ids):
    pair_span = gateway_spans(pg_ids)[0]
    del pair_span.attributes[a.REQUEST_ID]
    SpanStore(pg_engine, pair_deadline_s=300).write([pair_span])
    with Session(pg_engine) as session:
        row = session.get(SpanRecord, (pair_span.trace_id, pair_span.span_id))
        assert row is not None and a.REQUEST_BODY in row.attributes  # no request row holds it


@pytest.mark.parametrize(
    ("body", "stored"),
    [
        ('{"max_tokens": 8}', {"max_tokens": 8}),
        ('{"seed": 18446744073709551617}', {"seed": 2**64 + 1}),  # orjson: a float
        ('{"seed": -9223372036854775809}', {"seed": -(2**63) - 1}),  # 19 digits, the same
        ('{"temperature": NaN}', {"temperature": math.nan}),  # orjson refuses it
        ('{"messages": [{"role": "us', {"unparsed": '{"messages": [{"role": "us'}),  # cut off
    ],
    ids=["json", "big-integer", "big-negative-integer", "nan", "cut-off"],
)
def test_a_request_body_is_stored_as_json_whatever_parser_reads_it(sqlite_ids, body, stored):
    pair_span = gateway_spans(sqlite_ids)[0]
    pair_span.attributes[a.REQUEST_BODY] = body
    parsed = normalise([pair_span], pair_deadline_s=30).requests[0]["body"]
    assert repr(parsed) == repr(stored)  # the very types: 2**64 + 1 is not 1.8446744e19


@pytest.mark.postgres
def test_a_body_with_an_integer_past_64_bits_lands_exactly(pg_engine, pg_ids):
    spans = gateway_spans(pg_ids)
    spans[0].attributes[a.REQUEST_BODY] = '{"seed": 18446744073709551617, "top_p": NaN}'
    landed = SpanStore(pg_engine, pair_deadline_s=300).write(spans)  # orjson cannot write it
    requests, _, _ = stored(pg_engine)
    assert requests[0].body == {"seed": 2**64 + 1, "top_p": None} and landed.spans_new == 4


@pytest.mark.postgres
def test_cancelled_and_dropped_calls_land_with_their_status(pg_engine, pg_ids):
    # A client that left (cancelled) and a mirror that never started (dropped): stored as
    # such, with the mirror's queue wait kept on its span.
    _, baseline, candidate, _ = spans = gateway_spans(pg_ids)
    baseline.attributes[a.STATUS] = "cancelled"
    candidate.attributes[a.STATUS] = "dropped"
    candidate.attributes[a.MIRROR_QUEUE_S] = 1.5
    SpanStore(pg_engine, pair_deadline_s=300).write(spans)
    _, _, generations = stored(pg_engine)
    assert generations["baseline"].status.value == "cancelled"
    assert generations["candidate"].status.value == "dropped"
    with Session(pg_engine) as session:
        kept = session.get(SpanRecord, (candidate.trace_id, candidate.span_id))
        assert kept is not None and kept.attributes[a.MIRROR_QUEUE_S] == 1.5


def test_cut_evaluation_inputs_land_marked(pg_engine, pg_ids):
    spans = gateway_spans(pg_ids)
    spans[0].attributes[a.REQUEST_TRUNCATED] = ["inputs"]
    spans[0].attributes[a.REQUEST_BODY] = '{"messages": [{"role": "us'  # cut, unmarked
    route = next(s for s in spans if s.attributes.get(a.COHORT) == "candidate")
    route.attributes[a.OUTPUT_TRUNCATED] = True
    SpanStore(pg_engine, pair_deadline_s=300).write(spans)
    requests, _, generations = stored(pg_engine)
    assert requests[0].truncated == ["body", "inputs"]
    cut = {g.cohort.value: g.output_truncated for g in generations.values()}
    assert cut == {"baseline": None, "candidate": True}


@pytest.mark.parametrize("db", [pytest.param("pg", marks=pytest.mark.postgres), "sqlite"])
def test_a_pair_whose_calls_land_before_its_pair_span_waits_for_its_facts(request, db):
    """Both calls in one batch, the pair span (their parent, ended last) in the next: the
    pair is complete only once its request and episode are in, or the worker would score it
    without its request (no reference) and the gate fold it without its episode. At its
    deadline a pair whose calls are in completes anyway (the pair span may never come)."""
    engine = request.getfixturevalue(f"{db}_engine")
    ids = request.getfixturevalue(f"{db}_ids")
    store = SpanStore(engine, pair_deadline_s=300)
    pair_span, baseline, candidate, _ = gateway_spans(ids)
    early = store.write([baseline, candidate])
    with Session(engine) as session, session.begin():
        assert complete_ready(session, pair_ids=early.pair_ids, enqueue=None) == []
    late = store.write([pair_span])
    with Session(engine) as session, session.begin():
        assert complete_ready(session, pair_ids=late.pair_ids, enqueue=None) == late.pair_ids
    _, pairs, _ = stored(engine)
    assert pairs[0].state.value == "complete" and pairs[0].episode == "conv-7"
    assert pairs[0].request_id is not None


@pytest.mark.parametrize("db", [pytest.param("pg", marks=pytest.mark.postgres), "sqlite"])
def test_a_pair_whose_pair_span_never_lands_completes_at_its_deadline(request, db):
    engine = request.getfixturevalue(f"{db}_engine")
    ids = request.getfixturevalue(f"{db}_ids")
    _, baseline, candidate, _ = gateway_spans(ids)
    early = SpanStore(engine, pair_deadline_s=300).write([baseline, candidate])
    (pair_id,) = early.pair_ids
    with Session(engine) as session, session.begin():
        later = session.get(Pair, pair_id).deadline + timedelta(seconds=1)
        assert sweep_deadlines(session, now=later) == 0  # completed, not dropped
    _, pairs, _ = stored(engine)
    assert pairs[0].state.value == "complete" and pairs[0].request_id is None


@pytest.mark.parametrize("db", [pytest.param("pg", marks=pytest.mark.postgres), "sqlite"])
def test_a_pair_span_landing_before_its_calls_is_not_undone_by_their_stubs(request, db):
    """The other order: the pair span first, then both calls (their stubs conflict with the
    stored pair). A stub only marks a control pair: the pair keeps `pair_span` and its facts,
    so it completes as its calls land, not at its deadline."""
    engine = request.getfixturevalue(f"{db}_engine")
    ids = request.getfixturevalue(f"{db}_ids")
    store = SpanStore(engine, pair_deadline_s=300)
    pair_span, baseline, candidate, _ = gateway_spans(ids)
    store.write([pair_span])
    calls = store.write([baseline, candidate])
    with Session(engine) as session, session.begin():
        assert complete_ready(session, pair_ids=calls.pair_ids, enqueue=None) == calls.pair_ids
    _, pairs, _ = stored(engine)
    assert [(p.pair_span, p.episode, p.state.value) for p in pairs] == [
        (True, "conv-7", "complete")
    ]
    assert pairs[0].request_id is not None
