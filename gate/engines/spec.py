"""Speculative decoding settings and per-request statistics in vLLM's shapes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class NgramConfig:
    """vLLM's `ngram` method: copy the k tokens that followed an earlier match of the tail."""

    num_speculative_tokens: int = 8
    prompt_lookup_min: int = 3
    prompt_lookup_max: int = 3

    def __post_init__(self) -> None:
        if self.num_speculative_tokens < 1:
            raise ValueError("--num-speculative-tokens must be at least 1")
        if not 1 <= self.prompt_lookup_min <= self.prompt_lookup_max:
            raise ValueError("need 1 <= --prompt-lookup-min <= --prompt-lookup-max")

    def describe(self) -> dict[str, Any]:
        """Return the setting as vLLM's `--speculative-config` JSON would spell it."""
        return {
            "method": "ngram",
            "num_speculative_tokens": self.num_speculative_tokens,
            "prompt_lookup_min": self.prompt_lookup_min,
            "prompt_lookup_max": self.prompt_lookup_max,
        }


@dataclass
class SpecStats:
    """One request's verification steps, like vLLM's `--per-request-spec-decode-metrics`."""

    num_spec_tokens: int
    num_spec_steps: int = 0
    num_draft_tokens: int = 0
    num_accepted_draft_tokens: int = 0
    # Steps that accepted at least i+1 drafts, i.e. vLLM's accepted tokens per position.
    accepted_per_pos: list[int] = field(default_factory=list)
    # Index j: steps that accepted exactly j drafts (the bonus token excluded).
    histogram: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.accepted_per_pos = self.accepted_per_pos or [0] * self.num_spec_tokens
        self.histogram = self.histogram or [0] * (self.num_spec_tokens + 1)

    def observe(self, drafted: int, accepted: int) -> None:
        """Count one verification step that proposed `drafted` tokens and kept `accepted`."""
        if drafted <= 0:
            return
        self.num_spec_steps += 1
        self.num_draft_tokens += drafted
        self.num_accepted_draft_tokens += accepted
        for position in range(min(accepted, self.num_spec_tokens)):
            self.accepted_per_pos[position] += 1
        self.histogram[min(accepted, self.num_spec_tokens)] += 1

    @classmethod
    def from_counters(
        cls, k: int, *, steps: int, drafted: int, accepted: int, per_pos: list[int]
    ) -> SpecStats:
        """Rebuild the statistics from counter deltas (steps and accepted per position)."""
        per_pos = (per_pos + [0] * k)[:k]
        reached = [steps, *per_pos]
        histogram = [reached[j] - (reached[j + 1] if j < k else 0) for j in range(k + 1)]
        return cls(k, steps, drafted, accepted, per_pos, [max(0, h) for h in histogram])

    def summary(self) -> dict[str, Any]:
        """Return `metrics.speculative_decoding` as vLLM's `summary` level writes it."""
        steps, drafted = self.num_spec_steps, self.num_draft_tokens
        return {
            "mean_acceptance_length": 1 + self.num_accepted_draft_tokens / steps if steps else 1.0,
            "draft_acceptance_rate": self.num_accepted_draft_tokens / drafted if drafted else 0.0,
            "acceptance_histogram": list(self.histogram),
            "num_spec_steps": steps,
            "num_accepted_draft_tokens": self.num_accepted_draft_tokens,
            "num_draft_tokens": drafted,
            "num_spec_tokens": self.num_spec_tokens,
        }
