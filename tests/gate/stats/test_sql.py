"""SQL sufficient statistics (one fold from scratch) equal the replay path's (Postgres)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from sqlalchemy import insert

from gate.db.enums import Cohort, RolloutMode
from gate.db.models import Evaluation, Feedback, Generation, Pair
from gate.pairs.watermark import record_stamped
from gate.stats.cumulative import at_look, to_stats
from gate.stats.fold_stats import to_stats as folded_stats
from gate.stats.policy import Policy
from gate.stats.record_columns import columns, fold_order
from gate.stats.rule import FEEDBACK
from gate.stats.simulated_pairs import Scenario, draw_pairs, to_records
from gate.verdicts.folds import fold
from tests import factories

pytestmark = pytest.mark.postgres
POLICY = Policy()
START = datetime(2025, 5, 1, tzinfo=UTC)


def recorded_pairs(scenario: Scenario | None = None, policy: Policy = POLICY) -> list[dict]:
    """900 simulated pairs with control pairs, dropped pairs, greedy scores, one odd segment.

    Each pair's evaluations land up to a minute after it was created, in whole seconds
    (so fold order differs from creation order, with ties broken by id).
    """
    scenario = scenario or Scenario("mixed", 900, error_rate=0.02)
    rng = np.random.default_rng(4)
    cols = draw_pairs(scenario, policy, 1, rng)
    records = to_records(cols, policy)
    lags = rng.integers(0, 60, len(records))
    for i, record in enumerate(records):
        record["created_at"] = (START + timedelta(seconds=i)).isoformat()
        record["evaluated_at"] = (START + timedelta(seconds=i + int(lags[i]))).isoformat()
        if i % 9 == 0:
            record["candidate"]["evals"]["greedy_parity"] = i % 27 != 0
        if i % 10 == 3:
            record["is_control"] = True
            record["candidate"]["draft_tokens"] = 0
        if i % 50 == 7:
            record["candidate"] = None  # a dropped mirror
        if i % 40 == 1:
            record["segment"] = "unknown-segment"
    return records


# Side fields stored on the generation as they are (sampled-output parity's inputs); the
# answer's text is the side's `output`, from which the export computes distinct-2.
PARITY_FIELDS = ("temperature", "top_p", "max_tokens", "seed", "finish_reason",
                 "output_tokens", "logprob_tokens", "logprob_sum", "output",
                 "distinct_2")  # fmt: skip


def store(session, records: list[dict], rollout_id: int | None = None) -> int:
    """Store records as pairs, generations and evaluations; set each record's `pair_id`.

    Each pair's parity differences and loads are recorded as its stamp would
    (`gate.pairs.watermark.record_stamped`): loads from the scrapes stored before.
    """
    rollout_id = rollout_id or factories.rollout(session).id
    pair_rows, gen_rows, side_evals, side_feedback = [], [], [], []
    for record in records:
        pair_id = _own_id(record)
        record["pair_id"] = str(pair_id)
        created = datetime.fromisoformat(record["created_at"])
        pair_rows.append(
            {
                "id": pair_id, "rollout_id": rollout_id, "stage": record.get("stage", 0),
                "state": "dropped" if record["candidate"] is None else "complete",
                "is_control": record["is_control"], "segment": record["segment"],
                "created_at": created, "deadline": created + timedelta(minutes=5),
                "evaluated_at": datetime.fromisoformat(record["evaluated_at"]),
                "episode": record.get("episode"), "arm": record.get("arm"),
            }
        )  # fmt: skip
        second = Cohort.CONTROL if record["is_control"] else Cohort.CANDIDATE
        for cohort, side in ((Cohort.BASELINE, record["baseline"]), (second, record["candidate"])):
            if side is None:
                continue
            gen_rows.append(
                {
                    "rollout_id": rollout_id, "pair_id": pair_id, "cohort": cohort,
                    "segment": record["segment"], "status": side["status"],
                    "ttft_s": side["ttft_s"], "tpot_s": side["tpot_s"], "e2e_s": side["e2e_s"],
                    "spec_draft_tokens": side["draft_tokens"],
                    "spec_accepted_tokens": side["accepted_tokens"],
                    "trace_id": uuid.uuid4().hex, "span_id": uuid.uuid4().hex[:16],
                    **{key: side.get(key) for key in PARITY_FIELDS},
                    "exactness": side.get("exactness"),
                }
            )  # fmt: skip
            side_evals.append(side["evals"])
            side_feedback.append((pair_id, side.get("feedback")))
    session.execute(insert(Pair), pair_rows)
    ids = session.execute(
        insert(Generation).returning(
            Generation.id, Generation.started_at, sort_by_parameter_order=True
        ),
        gen_rows,
    ).all()
    session.execute(
        insert(Evaluation),
        [
            {
                "generation_id": gid,
                "generation_started_at": started,
                "evaluator": name,
                "version": "1",
                "passed": passed,
                "not_evaluable": "truncated" if passed is None else None,
            }
            for (gid, started), evals in zip(ids, side_evals, strict=True)
            for name, passed in evals.items()
        ],
    )
    # A side's rating (`feedback`: thumbs), as the feedback endpoint stores it.
    rated = [
        {"generation_id": gid, "pair_id": pair_id, "thumbs": thumbs}
        for (gid, _), (pair_id, thumbs) in zip(ids, side_feedback, strict=True)
        if thumbs is not None
    ]
    if rated:
        session.execute(insert(Feedback), rated)
    record_stamped(session, pair_ids=[row["id"] for row in pair_rows])
    session.flush()
    return rollout_id


def _own_id(record: dict) -> uuid.UUID:
    """The record's pair id when it is a UUID (ties in `evaluated_at` fold in id order, so
    a caller comparing with replay needs the same ids), else a fresh one."""
    try:
        return uuid.UUID(str(record["pair_id"]))
    except (KeyError, ValueError):
        return uuid.uuid4()


def as_floats(value: object, prefix: str = "") -> dict[str, float]:
    """Flatten a statistics dataclass into {"field.subfield": value}."""
    if not hasattr(value, "__dataclass_fields__"):
        array = np.asarray(value, dtype=np.float64)
        if array.ndim:  # per-bin sums (exactness): one entry a bin
            return {f"{prefix}{i}": float(v) for i, v in enumerate(array.ravel())}
        return {prefix: float(array)}
    out: dict[str, float] = {}
    for name in value.__dataclass_fields__:
        out.update(as_floats(getattr(value, name), f"{prefix}{name}."))
    return out


def test_sql_statistics_equal_the_replay_statistics(pg_session):
    records = recorded_pairs()
    rollout_id = store(pg_session, records)
    got = folded_stats(fold(pg_session, rollout_id=rollout_id, stage=0, policy=POLICY), POLICY)
    cols = columns(fold_order(records), POLICY, RolloutMode.SHADOW)
    want = at_look(to_stats(cols, POLICY, np.array([len(records)])), 0)
    assert float(got.n_pairs) == float(want.n_pairs) > 500
    assert float(got.n_dropped) == float(want.n_dropped) > 0
    assert float(got.elapsed_s) == pytest.approx(float(want.elapsed_s))
    assert bool(got.warmed_up) is bool(want.warmed_up) is True
    expected = {k: v for k, v in want.cells.items() if k[0] != FEEDBACK}  # not in SQL yet
    assert set(got.cells) == set(expected)
    for key, cell in expected.items():
        assert as_floats(got.cells[key]) == pytest.approx(as_floats(cell), rel=1e-9, abs=1e-9), key
    assert got.collapse == pytest.approx({k: float(v) for k, v in want.collapse.items()})


def with_every_outcome(records: list[dict]) -> list[dict]:
    """Give some sides each outcome class: cancelled, fallback, and not-evaluable results."""
    for i, record in enumerate(records):
        side = record["candidate"]
        if side is None or record["is_control"]:
            continue
        if i % 13 == 5:
            side["status"] = "cancelled"  # the client left: nobody's failure
        elif i % 17 == 2:
            side.update(status="fallback", ttft_s=None, tpot_s=None, e2e_s=None)
        elif i % 11 == 4:
            side["evals"] = {name: None for name in side["evals"]}  # not evaluable
    return records


def test_sql_and_replay_read_outcomes_and_not_evaluable_results_alike(pg_session):
    records = with_every_outcome(recorded_pairs())
    rollout_id = store(pg_session, records)
    got = folded_stats(fold(pg_session, rollout_id=rollout_id, stage=0, policy=POLICY), POLICY)
    cols = columns(fold_order(records), POLICY, RolloutMode.SHADOW)
    want = at_look(to_stats(cols, POLICY, np.array([len(records)])), 0)
    # Cancelled sides drop their pairs, into the data-quality count, on both paths.
    warm = POLICY.warmup_pairs
    cancelled = sum(
        1 for r in fold_order(records)[warm:] if (r["candidate"] or {}).get("status") == "cancelled"
    )
    assert cancelled > 0 and float(got.n_dropped) == float(want.n_dropped) >= cancelled
    expected = {k: v for k, v in want.cells.items() if k[0] != FEEDBACK}
    for key, cell in expected.items():
        assert as_floats(got.cells[key]) == pytest.approx(as_floats(cell), rel=1e-9, abs=1e-9), key


def test_a_side_with_only_not_evaluable_results_leaves_its_pair_unscored(pg_session):
    records = recorded_pairs()
    evaluator = next(iter(records[0]["baseline"]["evals"]))
    unscored = with_every_outcome(recorded_pairs())
    rollout_id = store(pg_session, records)
    full = folded_stats(fold(pg_session, rollout_id=rollout_id, stage=0, policy=POLICY), POLICY)
    other = store(pg_session, unscored, factories.rollout(pg_session, name="cut").id)
    cut = folded_stats(fold(pg_session, rollout_id=other, stage=0, policy=POLICY), POLICY)
    key = ("eval:" + evaluator, "all")
    assert key in full.cells
    # Fewer pairs scored, never more: a NULL result is neither a pass nor a fail.
    assert float(cut.cells[key].n) < float(full.cells[key].n)
