"""How much traffic a rollout sends to its candidate now and at its next stage.

The share of an alias's requests is the sample rate times the current stage's percent: a
sample rate of 1.0 at the default first stage (1 %) mirrors 1 % of requests, not all."""

from __future__ import annotations

from dataclasses import dataclass

from gate.db.enums import RolloutMode, RolloutState
from gate.db.models import Rollout
from gate.stats.policy import load_policy

# States in which the candidate gets traffic, or will once started or resumed.
_WOULD_RUN = (RolloutState.PENDING, RolloutState.RUNNING, RolloutState.HELD)


@dataclass(frozen=True)
class Exposure:
    """A rollout's candidate traffic: stage, share of requests now and after a promote."""

    mode: RolloutMode
    state: RolloutState
    sample_rate: float
    stage: int
    stages: tuple[float, ...]

    @property
    def stage_percent(self) -> float:
        """Percent of the sample rate at the current stage."""
        return self.stages[min(self.stage, len(self.stages) - 1)]

    @property
    def share(self) -> float:
        """Fraction of the alias's requests mirrored (shadow) or served (canary)."""
        return self.sample_rate * self.stage_percent / 100.0

    @property
    def next_share(self) -> float | None:
        """The share after the next promote; None on the last stage (a promote ends it)."""
        if self.stage + 1 >= len(self.stages):
            return None
        return self.sample_rate * self.stages[self.stage + 1] / 100.0

    def describe(self) -> str:
        """Say it in one line, e.g. for `rollout show`."""
        if self.state not in _WOULD_RUN:
            return f"no candidate traffic ({self.state.value})"
        verb = "mirrored to" if self.mode is RolloutMode.SHADOW else "served by"
        now = (
            f"{percent(self.share)} of requests {verb} the candidate (sample rate "
            f"{self.sample_rate:g} x stage {self.stage + 1}/{len(self.stages)} at "
            f"{self.stage_percent:g} %)"
        )
        if self.state is not RolloutState.RUNNING:
            now = f"once running, {now}"
        after = self.next_share
        if after is None:
            return f"{now}; last stage: promote makes the candidate the route"
        return f"{now}; next stage (promote): {percent(after)}"


def exposure_of(rollout: Rollout) -> Exposure:
    """Return a rollout's exposure, from its policy's stages."""
    return Exposure(
        mode=rollout.mode,
        state=rollout.state,
        sample_rate=rollout.sample_rate,
        stage=rollout.stage,
        stages=tuple(load_policy(rollout.policy).stages),
    )


def percent(fraction: float) -> str:
    """Write a fraction as a percent, e.g. 0.01 -> "1 %"."""
    return f"{fraction * 100:.4g} %"
