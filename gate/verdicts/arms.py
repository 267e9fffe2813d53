"""Each arm's own verdict (issue 40): a rollout's pairs grouped by arm, each stream judged
by replay as a rollout of that arm alone would be.

Each sampled episode goes to one arm by a hash of its key, never by outcomes
(`gate.gateway.sampling.choose_arm`), so each arm's pairs are a stream the gate's
single-candidate statistics judge validly on their own. What this does not do: share the
error rate among the arms (several arms are several looks at the kill and promotion
regions) or compare the arms with each other; that is the arm statistics' part
(`gate/stats/`). Nor does the periodic gate call it yet: `run_gate` judges a rollout's
pairs pooled over its arms. The SQL fold keeps no per-arm state (`gate_folds` is keyed by
rollout and stage), so every arm is judged by replaying its pairs.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from gate.db.enums import RolloutState
from gate.db.models import Rollout
from gate.pairs.export import pair_records
from gate.stats.policy import Policy, load_tolerance
from gate.stats.replay import replay
from gate.stats.verdict import VerdictResult
from gate.verdicts.service import NO_PAIRS


def arm_records(session: Session, *, rollout: Rollout) -> dict[str, list[dict[str, Any]]]:
    """Return the current stage's evaluated pair records of each arm, in fold order; the
    control pairs (the baseline against itself, no arm) are in every arm's."""
    by_arm: dict[str, list[dict[str, Any]]] = {arm.name: [] for arm in rollout.arms}
    stage = pair_records(session, rollout_id=rollout.id, stage=rollout.stage, evaluated_only=True)
    for record in stage:
        for name in list(by_arm) if record["arm"] is None else [record["arm"]]:
            by_arm.setdefault(name, []).append(record)
    return by_arm


def arm_verdicts(session: Session, *, rollout: Rollout, policy: Policy) -> dict[str, VerdictResult]:
    """Return each arm's verdict on the rollout's current stage, its pairs alone."""
    matched = load_tolerance(policy, promoted=rollout.state is RolloutState.PROMOTED)
    verdicts = {}
    for arm, records in arm_records(session, rollout=rollout).items():
        if not records:
            verdicts[arm] = NO_PAIRS
            continue
        judged = replay(
            records,
            policy,
            every=len(records),
            mode=rollout.mode,
            stage=rollout.stage,
            load_match=matched,
        )
        verdicts[arm] = judged.verdict
    return verdicts
