"""Rows for tests, built through the services where one exists."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gate.db.base import utcnow
from gate.db.enums import Cohort, GenerationStatus, RolloutMode, RouteRole
from gate.db.models import Evaluation, Generation, Pair, Rollout
from gate.rollouts import service
from gate.rollouts.schemas import RolloutIn, RouteIn
from gate.rollouts.states import Action


def rollout(
    session: Session,
    *,
    name: str = "r1",
    mode: RolloutMode = RolloutMode.SHADOW,
    base_url: str = "http://127.0.0.1:9/v1",
    candidate_url: str = "http://127.0.0.1:9/v1",
    sample_rate: float = 0.1,
    policy: dict[str, object] | None = None,
) -> Rollout:
    urls = {"base": base_url, "spec": candidate_url}
    for suffix, role in (("base", RouteRole.BASELINE), ("spec", RouteRole.CANDIDATE)):
        service.create_route(
            session,
            spec=RouteIn(name=f"{name}-{suffix}", base_url=urls[suffix], model="m", role=role),
            actor="test",
        )
    spec = RolloutIn(
        name=name,
        alias=name,
        baseline_route=f"{name}-base",
        candidate_route=f"{name}-spec",
        mode=mode,
        sample_rate=sample_rate,
        policy=policy or {},
    )
    return service.create_rollout(session, spec=spec, actor="test")


def running_rollout(session: Session, **kw: Any) -> Rollout:
    """Return a rollout (as `rollout` makes it) started: routed, mirrored, judged."""
    made = rollout(session, **kw)
    service.transition(session, rollout_id=made.id, action=Action.START, actor="t", reason="t")
    return made


def pair(
    session: Session, rollout_id: int, *, is_control: bool = False, deadline_in_s: float = 300.0
) -> Pair:
    row = Pair(
        id=uuid.uuid4(),
        rollout_id=rollout_id,
        is_control=is_control,
        deadline=utcnow() + timedelta(seconds=deadline_in_s),
    )
    session.add(row)
    session.flush()
    return row


def generation(
    session: Session,
    pair_row: Pair,
    cohort: Cohort,
    *,
    status: GenerationStatus = GenerationStatus.OK,
    output: str = "ok",
) -> Generation:
    row = Generation(
        rollout_id=pair_row.rollout_id,
        pair_id=pair_row.id,
        cohort=cohort,
        status=status,
        output=output,
        trace_id=uuid.uuid4().hex,
        span_id=uuid.uuid4().hex[:16],
    )
    session.add(row)
    session.flush()
    return row


def _loads(loads: tuple[float, float]) -> dict[str, float]:
    return {"baseline_load": loads[0], "candidate_load": loads[1]}


def seed_pairs(
    session: Session,
    rollout_id: int,
    count: int,
    *,
    seed: int = 0,
    tpot_ratio: float = 1.0,
    candidate_pass: float = 0.85,
    baseline_pass: float = 0.85,
    segment: str = "chat",
    stage: int = 0,
    loads: Callable[[int], tuple[float, float]] | None = None,
    arm: str | None = None,
) -> None:
    """Insert `count` complete, evaluated pairs with realistic latency noise (log-sd 0.5
    shared within a pair) and one evaluator ('task'), in bulk; `loads(i)` gives pair i's
    (baseline, candidate) running requests as stamped (None: no loads); `arm` names the
    arm of a rollout with several candidates they were mirrored to."""
    import numpy as np
    from sqlalchemy import insert

    rng = np.random.default_rng(seed)
    start = utcnow() - timedelta(hours=2)
    pairs, generations, evaluations = [], [], []
    next_id = (session.scalar(select(func.max(Generation.id))) or 0) + 1
    for i in range(count):
        pair_id = uuid.uuid4()
        created = start + timedelta(seconds=i)
        pairs.append(
            {
                "id": pair_id,
                "rollout_id": rollout_id,
                "stage": stage,
                "state": "complete",
                "is_control": False,
                "segment": segment,
                "created_at": created,
                "deadline": created + timedelta(minutes=5),
                # Evaluated in creation order, as a steady evaluation queue would.
                "evaluated_at": created + timedelta(seconds=2),
                "arm": arm,
                **(_loads(loads(i)) if loads else {}),
            }
        )
        shared = float(np.exp(rng.normal(0, 0.5)))
        quality = rng.random()
        for cohort, ratio, pass_rate in (
            ("baseline", 1.0, baseline_pass),
            ("candidate", tpot_ratio, candidate_pass),
        ):
            tpot = 0.02 * shared * ratio * float(np.exp(rng.normal(0, 0.1)))
            generations.append(
                {
                    "id": next_id,
                    "rollout_id": rollout_id,
                    "pair_id": pair_id,
                    "cohort": cohort,
                    "segment": segment,
                    "status": "ok",
                    "ttft_s": 0.1 * shared,
                    "tpot_s": tpot,
                    "e2e_s": 0.1 + 64 * tpot,
                    "spec_draft_tokens": 40 if cohort == "candidate" else 0,
                    "spec_accepted_tokens": 30 if cohort == "candidate" else 0,
                    "started_at": created,
                    "stream": True,
                    "trace_id": uuid.uuid4().hex,
                    "span_id": uuid.uuid4().hex[:16],
                }
            )
            evaluations.append(
                {
                    "generation_id": next_id,
                    "generation_started_at": created,
                    "evaluator": "task",
                    "version": "1",
                    "score": None,
                    "passed": bool(quality < pass_rate),
                    "details": {},
                    "created_at": created,
                }
            )
            next_id += 1
    session.execute(insert(Pair), pairs)
    session.execute(insert(Generation), generations)
    session.execute(insert(Evaluation), evaluations)
    session.flush()


def canary_cancel_records(
    policy: Any, *, cancel_rate: float, candidate_cancel_rate: float, pairs: int, seed: int
) -> list[dict[str, Any]]:
    """Simulated canary pair records (one side each) whose clients cancel at these rates."""
    import numpy as np

    from gate.stats.simulated_pairs import Scenario, draw_pairs, to_records

    rates = {"cancel_rate": cancel_rate, "candidate_cancel_rate": candidate_cancel_rate}
    scenario = Scenario("canary cancels", pairs, mode=RolloutMode.CANARY, **rates)
    cols = draw_pairs(scenario, policy, 1, np.random.default_rng(seed))
    assert cols.cancelled is not None
    candidate = ~np.isnan(cols.e2e[0, :, 1]) | cols.failed[0, :, 1] | cols.cancelled[0, :, 1]
    records = to_records(cols, policy)
    for i, (record, served) in enumerate(zip(records, candidate, strict=True)):
        record["baseline" if served else "candidate"] = None
        record["pair_id"] = str(uuid.UUID(int=i + 1))
        record["evaluated_at"] = record["created_at"] + 2.0
    return records


def insert_records(session: Session, rollout_id: int, records: list[dict[str, Any]]) -> None:
    """Store replay-schema pair records as closed, evaluated pairs with their sides."""
    from sqlalchemy import insert

    def at(epoch: float) -> datetime:
        return datetime.fromtimestamp(epoch, UTC)

    pairs, generations, evaluations = [], [], []
    next_id = (session.scalar(select(func.max(Generation.id))) or 0) + 1
    for record in records:
        created = at(record["created_at"])
        pair_id = uuid.UUID(record["pair_id"])
        pairs.append({"id": pair_id, "rollout_id": rollout_id, "stage": 0, "state": "complete",
                      "is_control": False, "segment": record["segment"], "created_at": created,
                      "deadline": created + timedelta(minutes=5),
                      "evaluated_at": at(record["evaluated_at"])})  # fmt: skip
        for cohort in ("baseline", "candidate"):
            side = record[cohort]
            if side is None:
                continue
            generations.append({"id": next_id, "rollout_id": rollout_id, "pair_id": pair_id,
                                "cohort": cohort, "segment": record["segment"],
                                "status": side["status"], "ttft_s": side["ttft_s"],
                                "tpot_s": side["tpot_s"], "e2e_s": side["e2e_s"],
                                "spec_draft_tokens": side["draft_tokens"],
                                "spec_accepted_tokens": side["accepted_tokens"],
                                "started_at": created, "stream": True,
                                "trace_id": uuid.uuid4().hex,
                                "span_id": uuid.uuid4().hex[:16]})  # fmt: skip
            for name, passed in side["evals"].items():
                evaluations.append({"generation_id": next_id, "generation_started_at": created,
                                    "evaluator": name, "version": "1",
                                    "score": None, "passed": passed, "details": {},
                                    "created_at": created})  # fmt: skip
            next_id += 1
    session.execute(insert(Pair), pairs)
    session.execute(insert(Generation), generations)
    session.execute(insert(Evaluation), evaluations)
    session.flush()


# (concurrency, speedup, low, high, call) per level: wins at 1 and 2, loses at 8.
CURVE = [(1, 1.42, 1.30, 1.55, "wins"), (2, 1.21, 1.08, 1.35, "wins"),
         (4, 1.02, 0.90, 1.13, "unclear"), (8, 0.81, 0.72, 0.90, "loses")]  # fmt: skip


def rehearsal_summary(*, at: int | None = 32, decision: str = "could not tell") -> dict[str, Any]:
    """Return a `specgate rehearse` JSON summary: all and copy cross over between 2 and 8,
    creative never wins."""
    route = {"requests": 8, "errors": 0, "ttft_s": {"p50": 0.1}, "e2e_s": {"p50": 1.0}}

    def cell(speed: float, low: float, high: float, call: str) -> dict[str, Any]:
        return {"speedup": speed, "interval": [low, high], "call": call,
                "baseline": route, "candidate": route}  # fmt: skip

    segments = {
        "all": lambda c, s, lo, hi, k: cell(s, lo, hi, k),
        "copy": lambda c, s, lo, hi, k: cell(s + 0.1, lo + 0.1, hi + 0.1, k),
        "creative": lambda c, s, lo, hi, k: cell(0.95, 0.8, 1.1, "unclear"),
    }
    return {
        "run_at": "2026-11-20T09:30:00+00:00",
        "routes": {"baseline": "http://plain:8001/v1", "candidate": "http://ngram:8002/v1"},
        "workload": {"source": "built-in workload", "requests": 40, "skipped_cut_prompt": 0},
        "budget_s": 600.0,
        "elapsed_s": 312.5,
        "levels": [
            {
                "concurrency": point[0],
                "stopped": "precision",
                "elapsed_s": 70.0,
                "segments": {name: make(*point) for name, make in segments.items()},
            }
            for point in CURVE
        ],
        "crossover": {
            "all": {"low": 2, "high": 8, "text": "between 2 and 8"},
            "copy": {"low": 2, "high": 8, "text": "between 2 and 8"},
            "creative": {
                "low": None,
                "high": None,
                "text": "could not tell (no level proven to win or to lose)",
            },
        },
        "at": at,
        "decision": decision,
    }
