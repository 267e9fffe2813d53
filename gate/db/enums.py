"""Value sets stored in the database. Stored as strings with CHECK constraints."""

from __future__ import annotations

from enum import StrEnum


class RouteRole(StrEnum):
    BASELINE = "baseline"
    CANDIDATE = "candidate"


class RolloutMode(StrEnum):
    SHADOW = "shadow"
    CANARY = "canary"


class RolloutState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    HELD = "held"
    KILLED = "killed"
    PROMOTED = "promoted"


class ArmState(StrEnum):
    """An arm of a rollout with several candidates: mirrored to, or killed on its own."""

    ACTIVE = "active"
    KILLED = "killed"


class PairState(StrEnum):
    OPEN = "open"
    COMPLETE = "complete"
    DROPPED = "dropped"


class Cohort(StrEnum):
    BASELINE = "baseline"
    CANDIDATE = "candidate"
    # The second baseline call of a baseline-vs-baseline control pair.
    CONTROL = "control"


class EpisodeSource(StrEnum):
    """Where a request's episode id came from (`gate.request.episodes`)."""

    HEADER = "header"
    BAGGAGE = "baggage"
    METADATA = "metadata"
    USER = "user"
    PREFIX = "prefix"


class Outcome(StrEnum):
    """What a generation's status means: the one definition every surface reads."""

    OK = "ok"
    # The route gave no usable answer: fails every evaluator, counts in the failure guardrail.
    ROUTE_FAILURE = "route_failure"
    # Neither route is to blame (the gateway's own bounds, or the client left): excluded from
    # evaluators and latency guardrails, counted in the gate's data-quality line.
    NOT_ATTRIBUTABLE = "not_attributable"


class GenerationStatus(StrEnum):
    OK = "ok"
    ERROR = "error"
    TIMEOUT = "timeout"
    FALLBACK = "fallback"
    DROPPED = "dropped"
    CANCELLED = "cancelled"

    @property
    def outcome(self) -> Outcome:
        """Return the outcome class of this status."""
        return _OUTCOMES[self]


_OUTCOMES = {
    GenerationStatus.OK: Outcome.OK,
    GenerationStatus.ERROR: Outcome.ROUTE_FAILURE,
    GenerationStatus.TIMEOUT: Outcome.ROUTE_FAILURE,
    GenerationStatus.FALLBACK: Outcome.ROUTE_FAILURE,
    GenerationStatus.DROPPED: Outcome.NOT_ATTRIBUTABLE,
    GenerationStatus.CANCELLED: Outcome.NOT_ATTRIBUTABLE,
}


def statuses_of(outcome: Outcome) -> frozenset[str]:
    """Return the status values (strings, for SQL and JSON) in one outcome class."""
    return frozenset(status.value for status in GenerationStatus if status.outcome is outcome)


def sql_statuses(outcome: Outcome) -> str:
    """Return the statuses of one outcome class as a SQL `IN` list body, sorted."""
    return ", ".join(f"'{value}'" for value in sorted(statuses_of(outcome)))


class Decision(StrEnum):
    CONTINUE = "continue"
    PROMOTE = "promote"
    KILL = "kill"
    HOLD = "hold"
