"""Turn spans into `requests`, `pairs` and `generations` rows, per `gate.telemetry.attributes`."""

from __future__ import annotations

import functools
import json
import logging
import math
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

from collectors.spans import STATUS_ERROR, from_unix_nano
from gate.db.enums import Cohort, GenerationStatus, PairState
from gate.db.rows import ENGINE_FIELDS, EngineFacts, GenerationRow, PairRow, RequestRow, SpanRow
from gate.exactness_fit import TokenFit
from gate.parity import text_distinct_2
from gate.request.episodes import MAX_CHARS as MAX_EPISODE_CHARS
from gate.telemetry import attributes as a

log = logging.getLogger(__name__)
_Keyed = TypeVar("_Keyed", RequestRow, PairRow)

_COHORTS = frozenset(member.value for member in Cohort)
_STATUSES = frozenset(member.value for member in GenerationStatus)
_OK, _ERROR, _OPEN = GenerationStatus.OK.value, GenerationStatus.ERROR.value, PairState.OPEN.value
_CONTROL = Cohort.CONTROL.value

# A normalised span is stored in `spans` without what its rows hold, so nothing is stored
# twice. Captured content always goes: prompts and outputs are then purged once, by
# retention on `generations` and `requests`. A route-call span also drops the attributes
# of GENERATION_HELD whose value its generation's column holds exactly (same type and
# value: a cut string, a UUID written another way or NaN stays). Each of those columns is
# NULL when the span lacks the attribute, so a column with a value means the span had
# exactly that attribute: the span and its generation together give back every attribute.
# Columns that a default, a fallback or vLLM's span can fill (status, segment, stream,
# model, e2e, error, queue time, token counts) keep their attributes in the span too. A
# pair span keeps everything but its content: the pair row is shared with the route
# spans' stubs and the span's pair id is its only link to it.
ROUTE_CONTENT = frozenset((a.PROMPT, a.OUTPUT, a.OUTPUT_EXTRA))
REQUEST_CONTENT = frozenset((a.REQUEST_BODY, a.REQUEST_INPUTS))
# Attributes of a route-call span and the `generations` columns that hold them.
GENERATION_HELD = {
    a.ROLLOUT_ID: "rollout_id", a.PAIR_ID: "pair_id", a.REQUEST_ID: "request_id",
    a.COHORT: "cohort", a.ROUTE_ID: "route_id", a.ROUTE_FINGERPRINT: "route_fingerprint",
    a.GEN_AI_REQUEST_TEMPERATURE: "temperature", a.GEN_AI_REQUEST_TOP_P: "top_p",
    a.GEN_AI_REQUEST_MAX_TOKENS: "max_tokens", a.GEN_AI_REQUEST_SEED: "seed",
    a.TTFT_S: "ttft_s", a.TPOT_S: "tpot_s", a.SPEC_DRAFTS: "spec_drafts",
    a.SPEC_DRAFT_TOKENS: "spec_draft_tokens", a.SPEC_ACCEPTED_TOKENS: "spec_accepted_tokens",
    a.GEN_AI_RESPONSE_ID: "response_id", a.ENGINE_TTFT_S: "engine_ttft_s",
    a.ENGINE_TPOT_S: "engine_tpot_s", a.LOGPROB_TOKENS: "logprob_tokens",
    a.LOGPROB_SUM: "logprob_sum",
}  # fmt: skip
_HELD_KEYS, _HELD_COLUMNS = tuple(GENERATION_HELD), tuple(GENERATION_HELD.values())


class NormaliseError(ValueError):
    """A span that should become a row carries a value the contract does not allow."""


@dataclass(slots=True)
class Normalised:
    """The rows one batch of spans becomes."""

    requests: list[RequestRow] = field(default_factory=list)
    # From pair spans: they own the pair's facts and overwrite a stub.
    pairs: list[PairRow] = field(default_factory=list)
    # From route spans whose pair span has not landed yet: inserted only if absent.
    pair_stubs: list[PairRow] = field(default_factory=list)
    generations: list[GenerationRow] = field(default_factory=list)
    # From vLLM `llm_request` spans: engine-side facts for the generation that is their parent.
    engine_facts: list[EngineFacts] = field(default_factory=list)
    # The spans to store: those normalised above without the content their rows now hold.
    spans: list[SpanRow] = field(default_factory=list)
    skipped: int = 0
    # Malformed attributes left out of their rows (the stored span keeps them).
    fields_dropped: int = 0


def normalise(rows: list[SpanRow], *, pair_deadline_s: float) -> Normalised:
    """Return the rows for the pair, route-call and vLLM spans among `rows`; skip the rest."""
    out = Normalised()
    for row in rows:
        try:
            kept = _normalise_one(out, row, pair_deadline_s)
            out.spans.append(row if kept is None else row.with_attributes(kept))
        except NormaliseError as exc:
            out.spans.append(row)
            out.skipped += 1
            log.warning(
                "collector.normalise_skipped trace_id=%s span_id=%s reason=%r",
                row.trace_id, row.span_id, str(exc),
            )  # fmt: skip
    # One row per key: an upsert cannot touch the same row twice in one statement.
    out.pairs = _unique(out.pairs)
    out.requests = _unique(out.requests)
    full = {row["id"] for row in out.pairs}
    out.pair_stubs = _merge_stubs([stub for stub in out.pair_stubs if stub["id"] not in full])
    merge_engine_facts(out.generations, out.engine_facts)
    return out


def _without_held(attrs: dict[str, Any], generation: GenerationRow) -> dict[str, Any]:
    """Return a copy of a route-call span's attributes without its content and without what
    its generation holds exactly: the same type and value (`True` is not 1, nor 2.0 is 2;
    NaN is never equal to itself; -0.0 stays, as SQLite stores it as 0). The caller's span
    is kept whole: a batch that fails is retried or spooled from it, maybe stored raw."""
    kept = _without(attrs, ROUTE_CONTENT)
    values, columns = map(attrs.get, _HELD_KEYS), map(generation.get, _HELD_COLUMNS)
    for key, value, column in zip(_HELD_KEYS, values, columns, strict=True):
        if value is None:
            continue
        # Mostly the very object: a conversion returns a value of the right type as is.
        if column is value or type(column) is type(value):
            if column == value and (value or type(value) is not float or _positive(value)):
                del kept[key]
        elif type(column) is uuid.UUID and value == _uuid_text(column):
            del kept[key]
    return kept


def _without(attrs: dict[str, Any], keys: frozenset[str]) -> dict[str, Any]:
    kept = attrs.copy()
    for key in keys:
        kept.pop(key, None)
    return kept


def _positive(zero: float) -> bool:
    return math.copysign(1.0, zero) > 0


@functools.lru_cache(maxsize=8192)
def _uuid_text(value: uuid.UUID) -> str:
    return str(value)


def merge_engine_facts(generations: list[GenerationRow], facts: list[EngineFacts]) -> None:
    """Fill generations' missing engine-side fields from the facts of their vLLM spans."""
    by_parent = {(fact["trace_id"], fact["parent_span_id"]): fact for fact in facts}
    if not by_parent:
        return
    for generation in generations:
        fact = by_parent.get((generation["trace_id"], generation["span_id"]))
        if fact is not None:
            for name in ENGINE_FIELDS:
                if generation[name] is None:
                    generation[name] = fact[name]


def _normalise_one(out: Normalised, row: SpanRow, pair_deadline_s: float) -> dict[str, Any] | None:
    """Add the rows of one span; return its attributes without what the rows hold (None:
    no row holds any of them)."""
    attrs = row.attributes
    if row.name == a.PAIR_SPAN_NAME:
        request, pair = pair_rows(row, pair_deadline_s)
        out.pairs.append(pair)
        if request is None:
            return None
        out.requests.append(request)
        return _without(attrs, REQUEST_CONTENT)
    if a.COHORT in attrs:
        generation = generation_row(row)
        out.generations.append(generation)
        if generation["exactness"] is None and attrs.get(a.EXACTNESS) is not None:
            out.fields_dropped += 1
            log.warning(
                "collector.field_dropped trace_id=%s span_id=%s attribute=%s",
                row.trace_id, row.span_id, a.EXACTNESS,
            )  # fmt: skip
        stub = pair_stub(row, generation, pair_deadline_s)
        if stub is not None:
            out.pair_stubs.append(stub)
        return _without_held(attrs, generation)
    if row.name == a.VLLM_SPAN_NAME and row.parent_span_id is not None:
        # Kept whole: a gateway span landing later reads its facts from the stored span.
        facts = engine_facts(row.trace_id, row.parent_span_id, attrs, row.start_time)
        out.engine_facts.append(facts)
    return None


# `pairs.arm`'s width (an arm's name is at most that, `gate.rollouts.schemas.ARM_NAME`).
ARM_CHARS = 64


def pair_rows(row: SpanRow, deadline_s: float) -> tuple[RequestRow | None, PairRow]:
    """Return the `requests` row (if the span names a request) and the `pairs` row."""
    attrs = row.attributes
    pair_id = _uuid(attrs.get(a.PAIR_ID), required=a.PAIR_ID)
    rollout_id = _int(attrs.get(a.ROLLOUT_ID), required=a.ROLLOUT_ID)
    assert pair_id is not None and rollout_id is not None  # `required` raised otherwise
    request_id = _uuid(attrs.get(a.REQUEST_ID))
    segment = _str(attrs.get(a.SEGMENT), 64) or "chat"
    episode = _str(attrs.get(a.EPISODE), MAX_EPISODE_CHARS)
    request: RequestRow | None = None
    if request_id is not None:
        body, inputs = _json(attrs.get(a.REQUEST_BODY)), _json(attrs.get(a.REQUEST_INPUTS))
        request = {
            "id": request_id,
            "rollout_id": rollout_id,
            "endpoint": _str(attrs.get(a.REQUEST_ENDPOINT), 32) or "chat",
            "body": body,
            "inputs": inputs or {},
            "truncated": _truncated(attrs.get(a.REQUEST_TRUNCATED), body=body, inputs=inputs),
            "segment": segment,
            "tenant": _str(attrs.get(a.TENANT), 128),
            "inflight_baseline": _int(attrs.get(a.INFLIGHT_BASELINE)) or 0,
            "inflight_candidate": _int(attrs.get(a.INFLIGHT_CANDIDATE)) or 0,
            "gateway_replica": _str(attrs.get(a.GATEWAY_REPLICA), 128),
            "episode": episode,
            "episode_source": _str(attrs.get(a.EPISODE_SOURCE), 16) if episode else None,
            "created_at": row.start_time,
        }
    deadline = _float(attrs.get(a.PAIR_DEADLINE_S))
    pair: PairRow = {
        "id": pair_id,
        "rollout_id": rollout_id,
        "request_id": request_id,
        "stage": _int(attrs.get(a.ROLLOUT_STAGE)) or 0,
        "state": _OPEN,
        "is_control": bool(attrs.get(a.PAIR_IS_CONTROL, False)),
        "segment": segment,
        "episode": episode,
        "arm": _str(attrs.get(a.ARM), ARM_CHARS),
        "pair_span": True,
        "created_at": row.start_time,
        "deadline": _after(row.start_time, deadline if deadline is not None else deadline_s),
    }
    return request, pair


def pair_stub(row: SpanRow, generation: GenerationRow, deadline_s: float) -> PairRow | None:
    """Return a placeholder `pairs` row so a generation can land before its pair span."""
    if generation["pair_id"] is None or generation["rollout_id"] is None:
        return None
    # The pair's own start where the gateway stamped it (the pair span's `created_at`, so a
    # partitioned `pairs` keyed on (id, created_at) merges the two); else this call's.
    started = row.attributes.get(a.PAIR_STARTED_NS)
    if isinstance(started, int) and not isinstance(started, bool):
        created = _moment(started)
    else:
        created = row.start_time
    return {
        "id": generation["pair_id"],
        "rollout_id": generation["rollout_id"],
        "request_id": None,
        "stage": _int(row.attributes.get(a.ROLLOUT_STAGE)) or 0,
        "state": _OPEN,
        "is_control": generation["cohort"] == _CONTROL,
        "segment": generation["segment"],
        "episode": None,  # the pair span's, when it lands
        "arm": _str(row.attributes.get(a.ARM), ARM_CHARS),
        "pair_span": False,  # its own span, with the request and the episode, comes later
        "created_at": created,
        "deadline": _after(created, deadline_s),
    }


def generation_row(row: SpanRow) -> GenerationRow:
    """Return the `generations` row of one route-call span."""
    attrs = row.attributes
    get = attrs.get
    cohort = get(a.COHORT)
    if cohort not in _COHORTS:
        raise NormaliseError(f"unknown cohort {cohort!r}")
    failed = row.status_code == STATUS_ERROR
    status = get(a.STATUS) or (_ERROR if failed else _OK)
    if status not in _STATUSES:
        raise NormaliseError(f"unknown status {status!r}")
    e2e = _float(get(a.E2E_S))
    finish = get(a.GEN_AI_RESPONSE_FINISH_REASONS)
    output, truncated = _str(get(a.OUTPUT), None), True if get(a.OUTPUT_TRUNCATED) else None
    return {
        "rollout_id": _int(get(a.ROLLOUT_ID)),
        "pair_id": _uuid(get(a.PAIR_ID)),
        "request_id": _uuid(get(a.REQUEST_ID)),
        "cohort": cohort,
        "route_id": _int(get(a.ROUTE_ID)),
        "route_fingerprint": _str(get(a.ROUTE_FINGERPRINT), 64),
        "segment": _str(get(a.SEGMENT), 64) or "chat",
        "model": _str(get(a.GEN_AI_RESPONSE_MODEL) or get(a.GEN_AI_REQUEST_MODEL), 256),
        "temperature": _float(get(a.GEN_AI_REQUEST_TEMPERATURE)),
        "top_p": _float(get(a.GEN_AI_REQUEST_TOP_P)),
        "max_tokens": _int(get(a.GEN_AI_REQUEST_MAX_TOKENS)),
        "seed": _int(get(a.GEN_AI_REQUEST_SEED)),
        "stream": bool(get(a.STREAM, False)),
        "ttft_s": _float(get(a.TTFT_S)),
        "tpot_s": _float(get(a.TPOT_S)),
        "e2e_s": e2e if e2e is not None else (row.end_time - row.start_time).total_seconds(),
        "queue_s": _float(get(a.QUEUE_S)),
        "input_tokens": _int(get(a.GEN_AI_USAGE_INPUT_TOKENS)),
        "output_tokens": _int(get(a.GEN_AI_USAGE_OUTPUT_TOKENS)),
        "finish_reason": _str(finish[0] if isinstance(finish, list) and finish else finish, 32),
        "status": status,
        "error": _str(get(a.ERROR), 4096) or (row.status_message if failed else None),
        "spec_drafts": _int(get(a.SPEC_DRAFTS)),
        "spec_draft_tokens": _int(get(a.SPEC_DRAFT_TOKENS)),
        "spec_accepted_tokens": _int(get(a.SPEC_ACCEPTED_TOKENS)),
        "prompt": _str(get(a.PROMPT), None),
        "output": output,
        "output_extra": _json(get(a.OUTPUT_EXTRA)),
        "output_truncated": truncated,
        "trace_id": row.trace_id,
        "span_id": row.span_id,
        "response_id": _str(get(a.GEN_AI_RESPONSE_ID), 128),
        "started_at": row.start_time,
        "engine_ttft_s": _float(get(a.ENGINE_TTFT_S)),
        "engine_tpot_s": _float(get(a.ENGINE_TPOT_S)),
        "logprob_tokens": _int(get(a.LOGPROB_TOKENS)),
        "logprob_sum": _float(get(a.LOGPROB_SUM)),
        "distinct_2": text_distinct_2(output, truncated=truncated),
        "exactness": exactness_of(get(a.EXACTNESS)),
    }


def exactness_of(value: Any) -> dict[str, Any] | None:
    """Return a call's stored exactness fields (`TokenFit.as_dict`) from its attribute;
    None when absent or malformed (counts that are not whole, bins that are not finite,
    not `BINS` of them, or do not sum to the tested tokens)."""
    raw = _json(value)
    if not isinstance(raw, dict):
        return None
    try:
        return TokenFit.from_dict(raw).as_dict()
    except ValueError:
        return None


def engine_facts(
    trace_id: str, parent_span_id: str, attrs: dict[str, Any], started_at: datetime
) -> EngineFacts:
    """Return the engine-side facts of a vLLM `llm_request` span, keyed by its parent."""
    return {
        "trace_id": trace_id,
        "parent_span_id": parent_span_id,
        "started_at": started_at,
        "queue_s": _float(attrs.get(a.VLLM_QUEUE)),
        "input_tokens": _int(attrs.get(a.VLLM_PROMPT_TOKENS)),
        "output_tokens": _int(attrs.get(a.VLLM_COMPLETION_TOKENS)),
    }


def _merge_stubs(stubs: list[PairRow]) -> list[PairRow]:
    merged: dict[uuid.UUID, PairRow] = {}
    for stub in stubs:
        first = merged.setdefault(stub["id"], stub)
        # Only the second call of a control pair says "control": any of them decides.
        first["is_control"] = first["is_control"] or stub["is_control"]
    return list(merged.values())


def _unique(rows: list[_Keyed]) -> list[_Keyed]:
    return list({row["id"]: row for row in reversed(rows)}.values())


def _moment(nanos: int) -> datetime:
    try:
        return from_unix_nano(nanos)
    except (ValueError, OverflowError):
        raise NormaliseError(f"a time of {nanos!r} ns is out of range") from None


def _after(start: datetime, seconds: float) -> datetime:
    try:
        return start + _seconds(seconds)
    except (ValueError, OverflowError):  # NaN, or past the datetime range
        raise NormaliseError(f"a deadline {seconds!r} s after the start is out of range") from None


@functools.lru_cache(maxsize=64)
def _seconds(seconds: float) -> timedelta:
    # A handful of deadlines (the configured one, and what gateways send) recur.
    return timedelta(seconds=seconds)


def _uuid(value: Any, *, required: str | None = None) -> uuid.UUID | None:
    if value is None or value == "":
        if required:
            raise NormaliseError(f"missing {required}")
        return None
    try:
        return _parse_uuid(str(value))
    except ValueError:
        raise NormaliseError(f"{value!r} is not a UUID") from None


@functools.lru_cache(maxsize=8192)
def _parse_uuid(text: str) -> uuid.UUID:
    # A pair id comes on three spans (pair span, two route calls), usually in one batch.
    return uuid.UUID(text)


def _int(value: Any, *, required: str | None = None) -> int | None:
    if value is None or isinstance(value, bool):
        if required:
            raise NormaliseError(f"missing {required}")
        return None
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an infinite float
        raise NormaliseError(f"{value!r} is not an integer") from None
    if not -(2**31) <= number < 2**31:
        raise NormaliseError(f"{number} does not fit an integer column")
    return number


def _float(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        raise NormaliseError(f"{value!r} is not a number") from None


def _str(value: Any, limit: int | None) -> str | None:
    if value is None:
        return None
    text = value if isinstance(value, str) else str(value)
    return text[:limit] if limit is not None else text


def _truncated(declared: Any, **parsed: Any) -> list[str] | None:
    """Return the request parts the gateway cut; a part that is no JSON was cut too."""
    cut = {str(part) for part in declared} if isinstance(declared, list | tuple) else set()
    cut |= {part for part, value in parsed.items() if _unparsed(value)}
    return sorted(cut) or None


def _unparsed(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"unparsed"}


def _json(value: Any) -> Any:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        # Keep what the gateway sent rather than losing the row over a cut-off JSON string.
        return {"unparsed": value}
