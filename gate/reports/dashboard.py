"""What the built-in dashboard draws for one rollout: series over a time window."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel
from sqlalchemy.orm import Session

from evaluators.registry import code_sandbox
from gate.db.enums import Cohort, Decision, GenerationStatus, Outcome, RolloutState
from gate.db.models import Generation, Rollout, Route, Verdict
from gate.reports import glance, headline, queries
from gate.reports.intervals import wilson
from gate.rollouts import repository
from gate.rollouts.exposure import exposure_of

NICE_STEPS_S = (60, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
POINTS = 60


class VerdictBrief(BaseModel):
    id: int
    decision: Decision
    reason_codes: list[str]
    summary: str
    n_pairs: int
    stage: int
    created_at: datetime
    # The reason codes in words, one sentence per reason family (codes stay above).
    reasons: list[str] = []


class RolloutRow(BaseModel):
    id: int
    name: str
    alias: str
    mode: str
    state: RolloutState
    stage: int
    # The stage for people: "2 of 4 (5 %)" (`stage` counts from 0).
    stage_label: str = ""
    sample_rate: float
    # Fraction of the alias's requests the candidate gets now and after the next promote
    # (sample rate x stage percent), and the same in words.
    share: float
    next_share: float | None
    exposure: str
    version: int
    baseline_route: str
    candidate_route: str
    latest_verdict: VerdictBrief | None
    # The answer at a glance, in one sentence (the same words as the glance endpoint's):
    # led by a kill, hold or promote when someone acted, then the gate's view.
    headline: str = ""
    # The gate's latest view alone (the verdict's sentence), for the verdict column.
    verdict_words: str = ""
    # How the task evaluator contains code: `/ui` flags `unsafe-local` next to the mode.
    sandbox: str | None = None
    # Why the rollout is in its state: the reason of the change that put it there (a hold
    # after a controller's own promotion reads "promoted by <controller>: ...").
    state_reason: str | None = None


class LatencyPoint(BaseModel):
    t: datetime
    cohort: Cohort
    n: int
    ttft_p50: float | None
    ttft_p99: float | None
    tpot_p50: float | None
    tpot_p99: float | None


class SegmentAcceptance(BaseModel):
    segment: str
    calls: int
    draft_tokens: int
    accepted_tokens: int
    rate: float | None
    mean_acceptance_length: float | None


class PassRate(BaseModel):
    """Passes among judged results; `not_evaluable` results are outside the rate."""

    evaluator: str
    cohort: Cohort
    n: int
    passed: int
    rate: float | None
    low: float
    high: float
    not_evaluable: int


class FailurePoint(BaseModel):
    """Shares of one bucket's calls per outcome: route failures (errors and timeouts,
    fallbacks), and calls no route is answerable for (dropped, cancelled)."""

    t: datetime
    cohort: Cohort
    n: int
    error_rate: float
    fallback_rate: float
    not_attributable_rate: float
    # The two kinds of not attributable, apart: the gateway's own bounds, the client.
    dropped_rate: float = 0.0
    cancelled_rate: float = 0.0


class StateChange(BaseModel):
    created_at: datetime
    actor: str
    action: str
    reason: str
    from_state: str | None
    to_state: str | None


class RolloutDashboard(BaseModel):
    rollout_id: int
    since: datetime
    until: datetime
    bucket_s: int
    latency: list[LatencyPoint]
    acceptance: list[SegmentAcceptance]
    quality: list[PassRate]
    failures: list[FailurePoint]
    verdicts: list[VerdictBrief]
    events: list[StateChange]


def bucket_for(window: timedelta) -> int:
    """Return the smallest round step that cuts `window` into at most ~60 points."""
    wanted = window.total_seconds() / POINTS
    return next((s for s in NICE_STEPS_S if s >= wanted), NICE_STEPS_S[-1])


def overview(session: Session) -> list[RolloutRow]:
    """Return every rollout, newest first, with its routes and latest verdict."""
    latest = queries.latest_verdicts(session)
    # One headline per rollout (a count query each): the table says what the detail says.
    names = {r.id: r.name for r in session.query(Route)}
    rows = []
    for r in repository.list_rollouts(session):
        verdict = latest.get(r.id)
        exposure = exposure_of(r)
        rows.append(
            RolloutRow(
                id=r.id,
                name=r.name,
                alias=r.alias,
                mode=r.mode.value,
                state=r.state,
                stage=r.stage,
                stage_label=f"{r.stage + 1} of {len(exposure.stages)} "
                f"({exposure.stage_percent:g} %)",
                sample_rate=r.sample_rate,
                share=exposure.share,
                next_share=exposure.next_share,
                exposure=exposure.describe(),
                version=r.version,
                baseline_route=names.get(r.baseline_route_id, ""),
                candidate_route=names.get(r.candidate_route_id, ""),
                latest_verdict=_brief(verdict) if verdict else None,
                # The headline answers for the stage shown, so only that stage's verdict.
                **_words(session, r, verdict if verdict and verdict.stage == r.stage else None),
                sandbox=code_sandbox(r.policy),
                state_reason=change.reason
                if (change := repository.last_change(session, r.id))
                else None,
            )
        )
    return rows


def _words(session: Session, rollout: Rollout, verdict: Verdict | None) -> dict[str, str]:
    head = glance.of_rollout(session, rollout=rollout, verdict=verdict).headline
    return {"headline": head.sentence, "verdict_words": head.verdict_sentence}


def first_seen(session: Session, *, rollout_id: int) -> datetime | None:
    """Return when the rollout's first pair or verdict was recorded (its data's birth)."""
    return queries.first_seen(session, rollout_id=rollout_id)


def rollout_dashboard(
    session: Session, *, rollout_id: int, since: datetime, until: datetime
) -> RolloutDashboard:
    """Return the series of one rollout over [since, until)."""
    step = bucket_for(until - since)
    window = queries.Window(rollout_id, since, until)
    return RolloutDashboard(
        rollout_id=rollout_id,
        since=since,
        until=until,
        bucket_s=step,
        latency=_latency(session, window, step=step),
        acceptance=[_acceptance(a) for a in queries.acceptance(session, window)],
        quality=[_pass_rate(p) for p in queries.pass_counts(session, window)],
        failures=_failures(queries.status_counts(session, window, step=step)),
        verdicts=[_brief(v) for v in queries.verdicts(session, window)],
        events=[
            StateChange.model_validate(e, from_attributes=True)
            for e in queries.state_changes(session, window)
        ],
    )


def _brief(verdict: Verdict) -> VerdictBrief:
    brief = VerdictBrief.model_validate(verdict, from_attributes=True)
    brief.reasons = headline.reason_sentences(verdict.reason_codes)
    return brief


def _when(epoch: int) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


def _latency(session: Session, window: queries.Window, *, step: int) -> list[LatencyPoint]:
    bucket = queries.epoch_bucket(session, Generation.started_at, step)
    where = [*queries.generation_filter(window), Generation.status == GenerationStatus.OK]
    keys: list[Any] = [bucket, Generation.cohort]
    ttft = queries.quantiles(
        session, value=Generation.ttft_s, keys=keys, where=where, probs=(0.5, 0.99)
    )
    tpot = queries.quantiles(
        session, value=Generation.tpot_s, keys=keys, where=where, probs=(0.5, 0.99)
    )
    points = []
    for key in sorted(set(ttft) | set(tpot)):
        a, b = ttft.get(key), tpot.get(key)
        points.append(
            LatencyPoint(
                t=_when(int(key[0])),
                cohort=Cohort(key[1]),
                n=max(a.n if a else 0, b.n if b else 0),
                ttft_p50=a.values[0] if a else None,
                ttft_p99=a.values[1] if a else None,
                tpot_p50=b.values[0] if b else None,
                tpot_p99=b.values[1] if b else None,
            )
        )
    return points


def _acceptance(row: queries.AcceptanceRow) -> SegmentAcceptance:
    rate = row.accepted_tokens / row.draft_tokens if row.draft_tokens else None
    length = 1 + row.accepted_tokens / row.drafts if row.drafts else None
    return SegmentAcceptance(
        segment=row.segment,
        calls=row.calls,
        draft_tokens=row.draft_tokens,
        accepted_tokens=row.accepted_tokens,
        rate=rate,
        mean_acceptance_length=length,
    )


def _pass_rate(row: queries.PassRow) -> PassRate:
    interval = wilson(row.passed, row.n)
    return PassRate(
        evaluator=row.evaluator,
        cohort=row.cohort,
        n=row.n,
        passed=row.passed,
        rate=interval.rate,
        low=interval.low,
        high=interval.high,
        not_evaluable=row.not_evaluable,
    )


_ERRORS = frozenset({GenerationStatus.ERROR, GenerationStatus.TIMEOUT})


def _failures(rows: list[queries.StatusRow]) -> list[FailurePoint]:
    counts: dict[tuple[int, Cohort], dict[GenerationStatus, int]] = defaultdict(dict)
    for row in rows:
        counts[(row.bucket or 0, row.cohort)][row.status] = row.count
    points = []
    for (when, cohort), by_status in sorted(counts.items()):
        n = sum(by_status.values())
        errors = sum(c for s, c in by_status.items() if s in _ERRORS)
        unattributable = sum(
            c for s, c in by_status.items() if s.outcome is Outcome.NOT_ATTRIBUTABLE
        )
        points.append(
            FailurePoint(
                t=_when(when),
                cohort=cohort,
                n=n,
                error_rate=errors / n,
                fallback_rate=by_status.get(GenerationStatus.FALLBACK, 0) / n,
                not_attributable_rate=unattributable / n,
                dropped_rate=by_status.get(GenerationStatus.DROPPED, 0) / n,
                cancelled_rate=by_status.get(GenerationStatus.CANCELLED, 0) / n,
            )
        )
    return points
