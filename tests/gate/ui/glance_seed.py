"""Three rollouts judged by the real gate: faster and fine, failing candidate, too young."""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
from sqlalchemy import update
from sqlalchemy.orm import Session

from gate.db.base import utcnow
from gate.db.models import EngineSample, Generation, Pair
from gate.pairs.load import RUNNING
from gate.rollouts import service
from gate.rollouts.schemas import ArmIn, RolloutIn, RouteIn
from gate.rollouts.states import Action
from gate.routing import service as routing
from gate.stats.simulated_pairs import draw_pairs, to_records
from gate.verdicts.service import run_gate
from tests import factories
from tests.gate.reports import seed
from tests.gate.stats.test_load_bands import POLICY as POLICY_BANDS
from tests.gate.stats.test_load_bands import QUARTER
from tests.gate.stats.test_sql import store

# Small minimums so a few hundred seeded pairs can reach a decision; default margins.
POLICY = {
    "segments": list(seed.SEGMENTS),
    "warmup_pairs": 20,
    "min_pairs": 150,
    "min_duration_s": 0,
    "stages": [100],
    "guardrails": {
        "failures": {"margin": 0.15},
        "evaluators": {"default": {"margin": 0.15}},
        "ttft_tail": {"margin": 0.15},
        "e2e_tail": {"margin": 0.15},
    },
}
YOUNG = {**POLICY, "warmup_pairs": 200, "min_pairs": 1000}
KINDS = {
    # name: (pairs, candidate arm, policy)
    "fast-fine": (
        600,
        seed.Arm(ttft_s=0.2, tpot_s=0.012, fail=0.0, acceptance={"chat": 0.6, "code": 0.7}),
        POLICY,
    ),
    # A failed call fails every evaluator, as the evaluators record it.
    "failing": (300, seed.Arm(fail=1.0, passes=dict.fromkeys(seed.EVALUATORS, 0.0)), POLICY),
    "young": (12, seed.Arm(tpot_s=0.012, acceptance={"chat": 0.6, "code": 0.7}), YOUNG),
}
BASELINE = seed.Arm(fail=0.0)


def judged(db: Session) -> dict[str, int]:
    """Seed each kind of rollout, run the gate once on it, return the rollout ids."""
    start = utcnow() - timedelta(minutes=50)
    return {
        name: judge(db, name=name, pairs=pairs, candidate=candidate, policy=policy, start=start)
        for name, (pairs, candidate, policy) in KINDS.items()
    }


def judge(
    db: Session,
    *,
    name: str,
    pairs: int,
    candidate: seed.Arm,
    policy: dict,
    start: datetime,
    segments: tuple[str, ...] = seed.SEGMENTS,
) -> int:
    """Seed one running rollout's evaluated pairs, run the gate once on it, return its id."""
    rollout = factories.rollout(db, name=name, policy=policy)
    routing.change_state(
        db, rollout_id=rollout.id, action=Action.START, actor="t", reason="t", publisher=None
    )
    seed.traffic(
        db, rollout.id, start=start, hours=0.75, pairs=pairs,
        baseline=BASELINE, candidate=candidate, seed=7, segments=segments,
    )  # fmt: skip
    # The seeded pairs are complete and evaluated, as the sweeper would leave them.
    db.execute(
        update(Generation)
        .where(Generation.rollout_id == rollout.id)
        .values(e2e_s=Generation.ttft_s + 40 * Generation.tpot_s)
    )
    db.execute(
        update(Pair).where(Pair.rollout_id == rollout.id).values(evaluated_at=Pair.created_at)
    )
    run_gate(db, rollout_id=rollout.id, publisher=None)
    return rollout.id


def banded(db: Session, *, name: str = "banded") -> int:
    """Seed a shadow rollout whose engines reported their running requests, judge it with
    the real gate (load bands on), and return its id: the newest verdict has load bands."""
    start = utcnow() - timedelta(hours=1)
    records = []
    drawn = draw_pairs(QUARTER, POLICY_BANDS, 1, np.random.default_rng(4))
    for i, record in enumerate(to_records(drawn, POLICY_BANDS)):
        at = (start + timedelta(seconds=i)).isoformat()
        for side in ("baseline", "candidate"):  # `store` needs an evaluation per side
            record[side]["evals"] = {"task": True}
        records.append({**record, "created_at": at, "evaluated_at": at})
    rollout = factories.rollout(db, name=name, policy=POLICY_BANDS.model_dump())
    for i, record in enumerate(records):  # one scrape of each engine at each pair's start
        for route, side in ((rollout.baseline_route_id, "baseline"),
                            (rollout.candidate_route_id, "candidate")):  # fmt: skip
            db.add(
                EngineSample(
                    route_id=route, metric=RUNNING, labels={}, value=record[side]["load"],
                    scraped_at=start + timedelta(seconds=i),
                )
            )  # fmt: skip
    db.flush()
    store(db, records, rollout.id)  # stamps each pair's loads: the scrapes exist
    run_gate(db, rollout_id=rollout.id, publisher=None)
    return rollout.id


# Three n-gram arms judged by the real gate: k4 faster, k8 harmful (task passes drop), k2
# barely faster. The gate kills k8 on its own and k4 wins.
ARMS = {"k4": {"tpot_ratio": 0.7}, "k8": {"candidate_pass": 0.6}, "k2": {"tpot_ratio": 0.95}}
ARMS_POLICY = {"segments": ["chat"], "warmup_pairs": 50, "min_pairs": 300,
               "min_duration_s": 0, "stages": [100]}  # fmt: skip


def armed(db: Session, *, name: str = "ngram-arms") -> int:
    """Seed a running rollout with three arms, run the gate once on it, return its id."""
    routes = [(f"{name}-plain", "baseline"), *[(f"{name}-{a}", "candidate") for a in ARMS]]
    for route, role in routes:
        spec = RouteIn(name=route, base_url="http://127.0.0.1:9/v1", model="m", role=role)
        service.create_route(db, spec=spec, actor="t")
    arms = [ArmIn(name=a, route=f"{name}-{a}") for a in ARMS]
    spec = RolloutIn(
        name=name, alias=name, baseline_route=f"{name}-plain", arms=arms, policy=ARMS_POLICY
    )
    rollout = service.create_rollout(db, spec=spec, actor="t")
    service.transition(db, rollout_id=rollout.id, action=Action.START, actor="t", reason="t")
    for i, (arm, shape) in enumerate(ARMS.items()):
        factories.seed_pairs(db, rollout.id, 600, arm=arm, seed=i + 1, **shape)  # type: ignore[arg-type]
    run_gate(db, rollout_id=rollout.id, publisher=None)
    return rollout.id
