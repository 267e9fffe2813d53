"""One rollout's answer at a glance, read from the database: headline and grid."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel
from sqlalchemy.orm import Session

from gate.db.base import utcnow
from gate.db.enums import ArmState, RolloutState
from gate.db.models import Rollout, Verdict
from gate.rehearse import repository as rehearsals
from gate.reports import headline as words
from gate.reports import queries
from gate.reports.crossover import CrossoverView
from gate.reports.crossover import view as crossover_view
from gate.reports.guardrails import band_row
from gate.reports.rehearsal import RehearsalView, view
from gate.rollouts import repository
from gate.rollouts.exposure import exposure_of
from gate.stats.arms import shares
from gate.stats.policy import load_policy

# What a rollout without a verdict reads as: the gate has not judged any pair yet.
NO_VERDICT = {"decision": "continue", "reason_codes": ["no_pairs"], "estimates": [], "n_pairs": 0}


class Glance(BaseModel):
    """The headline and grid of a rollout's newest verdict, and which verdict that was."""

    rollout_id: int
    verdict_id: int | None
    verdict_at: datetime | None
    stage: int
    headline: words.Headline
    grid: words.Grid
    # The verdict's load bands as rows (`guardrails.BAND_HEADERS`); empty without loads.
    bands: list[list[str]] = []
    # The rehearsal recorded for the rollout (`specgate rehearse --rollout`), if any.
    rehearsal: RehearsalView | None = None
    # With `promotion.route_by_load`: the crossover per segment the gateway routes by once
    # the rollout is promoted (`gate.reports.crossover`); None without it.
    crossover: CrossoverView | None = None
    # A rollout with several candidates: the verdict's choice (winner, leader) and each
    # arm's state, decision, pairs, ratio and interval (`verdicts.arms`); None: one candidate.
    arms: dict[str, Any] | None = None
    # Each active arm's current share of the sampled episodes (its weight over the active
    # arms' sum, `gate.stats.arms.shares`); empty for one candidate.
    shares: dict[str, float] = {}


def of_rollout(
    session: Session,
    *,
    rollout: Rollout,
    verdict: Verdict | None,
    now: datetime | None = None,
    acts_until: datetime | None = None,
) -> Glance:
    """Return the glance of `rollout` as of `verdict` (None: not judged yet), led by the
    kill, hold or promote that put the rollout where it was (at `acts_until`, if given)."""
    policy = load_policy(rollout.policy)
    pairs, first = queries.stage_pace(session, rollout_id=rollout.id, stage=rollout.stage)
    until = now or utcnow()
    # Only a report's week bounds the audit trail: a live glance takes the newest change,
    # whatever the clocks of the hosts that recorded it.
    change = repository.last_change(session, rollout.id, until=acts_until)
    exposure = exposure_of(rollout)
    act = words.act_of(change, stages=len(exposure.stages))
    # A promote's next step is only news while the rollout can still be promoted.
    running = rollout.state is RolloutState.RUNNING
    promote_next = words.promotion_next(exposure) if running else None
    elapsed = (until - first).total_seconds() if first is not None else 0.0
    pace = words.Pace(pairs=pairs, elapsed_s=max(0.0, elapsed))
    source = verdict if verdict is not None else NO_VERDICT
    rehearsed = rehearsals.latest(session, rollout_id=rollout.id)
    now_shares = shares({a.name: a.weight for a in rollout.arms if a.state is ArmState.ACTIVE})
    return Glance(
        rollout_id=rollout.id,
        verdict_id=verdict.id if verdict else None,
        verdict_at=verdict.created_at if verdict else None,
        stage=rollout.stage,
        headline=words.headline(
            source,
            policy=policy,
            pace=pace,
            act=act,
            promote_next=promote_next,
            shares=now_shares,
        ),
        grid=words.grid(source, policy=policy),
        bands=[band_row(b) for b in (verdict.bands or [] if verdict else [])],
        rehearsal=view(rehearsed) if rehearsed else None,
        crossover=crossover_view(session, rollout=rollout, policy=policy, now=until)
        if policy.promotion.route_by_load
        else None,
        arms=verdict.arms if verdict else None,
        shares=now_shares,
    )


def latest(session: Session, *, rollout: Rollout) -> Glance:
    """Return the glance of the rollout's newest verdict on its current stage.

    A verdict of an earlier stage (the rollout moved on, not judged since) is not this
    stage's answer: its decision and pairs would be read as the new stage's.
    """
    verdict = queries.latest_verdicts(session, rollout_id=rollout.id).get(rollout.id)
    if verdict is not None and verdict.stage != rollout.stage:
        verdict = None
    return of_rollout(session, rollout=rollout, verdict=verdict)
