"""The rehearsal summary as a rollout records it: `rehearsal.json`, validated.

Only what the surfaces read is typed; each route's percentiles and the rest of the
document are kept as written, so a newer `specgate rehearse` can add fields.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gate.rehearse.analysis import ALL, ALPHA

Bound = float | None


class Cell(BaseModel):
    """One level and segment: the speedup, its 95 % interval and the call."""

    model_config = ConfigDict(extra="allow")

    speedup: float | None = Field(None, gt=0)
    interval: tuple[float, float] | None = None
    call: Literal["wins", "loses", "unclear"] | None = None

    @model_validator(mode="after")
    def _interval_holds_the_estimate(self) -> Cell:
        if (self.speedup is None) != (self.interval is None):
            raise ValueError("a speedup and its interval come together (both or neither)")
        if self.speedup is not None and self.interval is not None:
            low, high = self.interval
            if not 0 <= low <= self.speedup <= high:
                raise ValueError(f"interval {list(self.interval)} does not hold {self.speedup}")
        return self


class LevelIn(BaseModel):
    """One concurrency level of the sweep."""

    model_config = ConfigDict(extra="allow")

    concurrency: int = Field(ge=1, le=100_000)
    segments: dict[str, Cell] = Field(min_length=1)


class CrossoverIn(BaseModel):
    """Where the candidate stops winning, in words and bounds."""

    low: int | None = None
    high: int | None = None
    text: str = Field(min_length=1, max_length=300)


class RoutesIn(BaseModel):
    baseline: str = Field(min_length=1, max_length=512)
    candidate: str = Field(min_length=1, max_length=512)


class WorkloadIn(BaseModel):
    model_config = ConfigDict(extra="allow")

    source: str = Field(min_length=1, max_length=512)
    requests: int = Field(ge=0)


# A several-arm summary's limits, which `specgate rehearse` checks before its sweep.
MAX_ARMS = 16
ARM_NAME_MAX = 64


class ArmIn(BaseModel):
    """One candidate arm of a several-arm rehearsal: its own curve against the baseline."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1, max_length=ARM_NAME_MAX)
    url: str = Field(min_length=1, max_length=512)
    usable: bool = Field(description="False when the arm failed the exactness test.")
    levels: list[LevelIn] = Field(min_length=1, max_length=64)
    crossover: dict[str, CrossoverIn]
    decision: str = Field("no --at given", min_length=1, max_length=32)
    # None: a summary written before arms carried it; their alpha is the document's.
    interval_alpha: float | None = Field(None, gt=0, lt=1)
    exactness: dict[str, Any] | None = None


class BestCell(BaseModel):
    """The best usable arm at one level of one segment (`gate.rehearse.arms.best`)."""

    model_config = ConfigDict(extra="allow")

    concurrency: int
    arm: str | None = None
    call: Literal["only", "leads", "tied", "unclear"] | None = None
    speedup: float | None = None
    runner_up: str | None = None


class RehearsalIn(BaseModel):
    """A `specgate rehearse` JSON summary (`rehearsal.json`)."""

    model_config = ConfigDict(extra="allow")

    run_at: datetime | None = None
    routes: RoutesIn
    workload: WorkloadIn
    levels: list[LevelIn] = Field(
        min_length=1, max_length=64, description="By concurrency, rising without repeats (422)."
    )
    crossover: dict[str, CrossoverIn] = Field(
        description="Per segment, where the candidate stops winning; it must name `all`, and "
        "each level's segments must be exactly the crossover's (422 otherwise).",
        json_schema_extra={"required": [ALL]},
    )
    at: int | None = Field(None, ge=1)
    decision: str = Field("no --at given", min_length=1, max_length=32)
    interval_alpha: float = Field(
        ALPHA, gt=0, lt=1, description="The speedup intervals' alpha (0.05 / K with K arms)."
    )
    lead: str | None = Field(
        None, description="Several arms: the arm whose curve the top of the document is."
    )
    arms: list[ArmIn] | None = Field(None, min_length=2, max_length=MAX_ARMS)
    best: dict[str, list[BestCell]] | None = None

    @model_validator(mode="after")
    def _one_curve_per_segment(self) -> RehearsalIn:
        swept = [level.concurrency for level in self.levels]
        if swept != sorted(set(swept)):
            raise ValueError(f"levels must rise without repeats, got concurrency {swept}")
        if ALL not in self.crossover:
            raise ValueError(f"crossover must name the '{ALL}' segment")
        for level in self.levels:
            if set(level.segments) != set(self.crossover):
                raise ValueError(
                    f"level {level.concurrency} has segments {sorted(level.segments)}, "
                    f"the crossover {sorted(self.crossover)}"
                )
        names = [arm.name for arm in self.arms or ()]
        if (self.lead is None) != (self.arms is None) or (names and self.lead not in names):
            raise ValueError(f"lead {self.lead!r} must name one of the arms {names}")
        return self

    def segments(self) -> list[str]:
        """Return the segments, "all" first."""
        return [ALL, *sorted(s for s in self.crossover if s != ALL)]

    def document(self) -> dict[str, Any]:
        """Return the summary as stored: every field, dates as ISO strings."""
        return self.model_dump(mode="json")
