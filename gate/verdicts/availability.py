"""A candidate that cannot answer is failing: its route's down time enters the verdict.

While a candidate route refuses connections the gateway skips its calls; once a probe is
refused too, each is recorded as the candidate's route failure with the error `candidate
route down` (so the failure guardrail counts them). Counting pairs alone can take hours
at a small stage share, so the time counts too: when the skipped calls since the candidate
last answered (and since the rollout's last start or resume) span more than the policy's
`max_candidate_down_s`, the verdict is a kill, said in words. The span is read from the
stored generations, so every gateway replica and worker counts alike.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gate.db.enums import Cohort, Decision, GenerationStatus
from gate.db.models import Generation
from gate.rollouts import repository
from gate.routing.health import ROUTE_DOWN
from gate.stats.ids import Reason, ReasonKind
from gate.stats.policy import Policy
from gate.stats.verdict import VerdictResult

CANDIDATE_DOWN = Reason(ReasonKind.CANDIDATE_DOWN)


@dataclass(frozen=True)
class Outage:
    """The candidate's calls skipped as down since it last answered."""

    first: datetime
    last: datetime
    skipped: int

    @property
    def down_s(self) -> float:
        """Return how long the skipped calls span, in seconds."""
        return (self.last - self.first).total_seconds()


def outage(session: Session, *, rollout_id: int) -> Outage | None:
    """Return the rollout's current candidate outage, or None when it last answered."""
    # Nobody asks the candidate while the rollout is held or killed: an outage seen before
    # the rollout last entered its state (a resume) is not down time since. Both reads
    # start there, so a partitioned `generations` is read from then on.
    change = repository.last_change(session, rollout_id)
    since = [] if change is None else [Generation.started_at >= change.created_at]
    candidate = (Generation.rollout_id == rollout_id, Generation.cohort == Cohort.CANDIDATE)
    answered = session.scalar(
        select(func.max(Generation.started_at)).where(
            *candidate, *since, Generation.status == GenerationStatus.OK
        )
    )
    after = [] if answered is None else [Generation.started_at > answered]
    first, last, skipped = session.execute(
        select(
            func.min(Generation.started_at), func.max(Generation.started_at), func.count()
        ).where(*candidate, *since, *after, Generation.error == ROUTE_DOWN)
    ).one()
    if not skipped:
        return None
    return Outage(first=first, last=last, skipped=int(skipped))


def judge(result: VerdictResult, policy: Policy, down: Outage | None) -> VerdictResult:
    """Return `result`, or a kill when the candidate was down beyond the policy's limit."""
    if down is None or down.down_s <= policy.max_candidate_down_s:
        return result
    words = (
        f"kill: the candidate route has not answered for {_duration(down.down_s)}:"
        f" the gateway skipped {down.skipped:,} call(s) to it as down since"
        f" {down.first:%Y-%m-%d %H:%M:%S} UTC, beyond the policy's"
        f" {_duration(policy.max_candidate_down_s)} (max_candidate_down_s)."
        f" The pairs alone say: {result.summary}"
    )
    return replace(
        result, decision=Decision.KILL, reason_codes=(CANDIDATE_DOWN.code,), summary=words
    )


def _duration(seconds: float) -> str:
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
