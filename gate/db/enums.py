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


class PairState(StrEnum):
    OPEN = "open"
    COMPLETE = "complete"
    DROPPED = "dropped"


class Cohort(StrEnum):
    BASELINE = "baseline"
    CANDIDATE = "candidate"
    # The second baseline call of a baseline-vs-baseline control pair.
    CONTROL = "control"


class GenerationStatus(StrEnum):
    OK = "ok"
    ERROR = "error"
    TIMEOUT = "timeout"
    FALLBACK = "fallback"
    DROPPED = "dropped"


class Decision(StrEnum):
    CONTINUE = "continue"
    PROMOTE = "promote"
    KILL = "kill"
    HOLD = "hold"
