"""A several-arm `specgate rehearse` summary built by the CLI's own code from chosen samples.

Three n-gram arms against one baseline, swept at 1, 2, 4 and 8 concurrent requests on a
chat and a code segment, each arm's intervals at 0.05 / 3 as the CLI judges them:
`k4` is well ahead at low load and crosses over between 2 and 8, `k2` gains less and
holds longer, and `k8` is the fastest on every level but failed the exactness test, so
it is reported and never chosen.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gate.cli.rehearse import _arm
from gate.engines.workload import WorkloadItem
from gate.rehearse import arms, exactness
from gate.rehearse.analysis import ALPHA
from gate.rehearse.runner import Block, Route, Sample
from gate.rehearse.sweep import Level, Plan
from gate.rehearse.workload import Workload

LEVELS = [1, 2, 4, 8]
REQUESTS = 24  # per route and level, the same workload items on every route
# Each arm's speedup over the baseline per level (its seconds per token are the
# baseline's over this, with a little noise of its own).
SPEEDUPS = {
    "k2": [1.15, 1.12, 1.08, 1.02],
    "k4": [1.45, 1.3, 1.0, 0.75],
    "k8": [1.7, 1.6, 1.5, 1.4],
}
BASELINE = Route("baseline", "http://plain:8001/v1")
ROUTES = [Route(name, f"http://{name}:800{i + 2}/v1") for i, name in enumerate(SPEEDUPS)]
CHECK = exactness.Check(requests=16, max_tokens=64, mode="processed", parity_requests=4,
                        margin=0.05, alpha=0.01)  # fmt: skip


def arms_summary(*, at: int = 2) -> dict[str, Any]:
    """Return the summary `specgate rehearse --candidate k2=... --candidate k4=...
    --candidate k8=... --at AT` writes (AT 2: k4 leads there and pays)."""
    items = [WorkloadItem(str(i), "chat" if i % 2 else "code", "/v1/chat/completions", {})
             for i in range(REQUESTS)]  # fmt: skip
    found = Workload(items, "built-in workload")
    done = [_level(level, i, items) for i, level in enumerate(LEVELS)]
    plan = Plan(levels=LEVELS, budget_s=600.0)
    alpha = ALPHA / len(ROUTES)
    results = [
        _arm((BASELINE, route), found, done, plan, at, "2026-11-28T09:30:00+00:00",
             _exactness(route.name), CHECK, alpha)
        for route in ROUTES
    ]  # fmt: skip
    return arms.combine(BASELINE, results, done, arms.lead_level(LEVELS, at))


def _level(concurrency: int, index: int, items: list[WorkloadItem]) -> Level:
    rng = np.random.default_rng(concurrency)
    base = [0.02 * (1 + concurrency / 8) * float(np.exp(rng.normal(0, 0.08))) for _ in items]

    def block(name: str, per_token: list[float]) -> Block:
        pairs = zip(items, per_token, strict=True)
        samples = [Sample(item.segment, ok=True, ttft_s=0.1, e2e_s=0.1 + 99 * s, tokens=100,
                          item=item.id) for item, s in pairs]  # fmt: skip
        return Block(name, concurrency, 10.0, samples, busy_s=10.0 * concurrency)

    blocks = [block(BASELINE.name, base)]
    for name, gains in SPEEDUPS.items():
        noise = rng.normal(0, 0.06, len(items))
        blocks.append(
            block(
                name,
                [b / gains[index] * float(np.exp(e)) for b, e in zip(base, noise, strict=True)],
            )
        )
    return Level(concurrency, blocks, stop="precise", elapsed_s=80.0)


def _exactness(name: str) -> exactness.Result:
    """Return the exactness phase's result: `k8` deviates (TV above the margin), the others
    are exact."""
    base = exactness.Verdict("exact", "exact: no deviation beyond TV 0.05 over 940 tokens",
                             tokens=940, answers=16)  # fmt: skip
    parity = exactness.Parity(compared=4, identical=4, errors=0, diverged_at=[])
    if name != "k8":
        return exactness.Result(base, base, parity, failed=False, alarm=False)
    deviates = exactness.Verdict(
        "deviates", "deviates: TV 0.21 [0.12, 0.30] beyond the margin 0.05", tokens=910,
        answers=16, tv=(0.21, 0.12, 0.30),
    )  # fmt: skip
    split = exactness.Parity(compared=4, identical=1, errors=0, diverged_at=[3, 9, 17])
    return exactness.Result(deviates, base, split, failed=True, alarm=False)
