"""Typed identifiers: metrics, cells and reasons, each rendered to its stable string once.

The strings (`eval:task`, `kill:ttft_p50:chat`, ...) are what the verdicts table, the
API and /ui store and show; they never change shape. Code builds and reads the typed
values and renders them; nothing splits a string back into its parts.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

EVAL_PREFIX = "eval:"
# The pooled cell of every guardrail; never a declared segment.
ALL = "all"
# The pooled cells of pairs whose segment the policy does not declare (clients may set
# any segment by header); never a declared segment either.
UNDECLARED = "undeclared"


class MetricId(str):
    """A metric's id: a guardrail's, or `<guardrail>:<part>` for one of its several metrics
    (`eval:<name>`: one evaluator's fail rate; `parity:<statistic>`: one answer statistic).

    A `str` (cell keys compare equal to plain strings), carrying its parts as fields.
    """

    guardrail: str
    part: str | None

    def __new__(cls, guardrail: str, part: str | None = None) -> MetricId:
        text = guardrail if part is None else f"{guardrail}:{part}"
        made = super().__new__(cls, text)
        made.guardrail, made.part = guardrail, part
        return made

    @property
    def evaluator(self) -> str | None:
        """Return the evaluator's name of an `eval:<name>` metric, else None."""
        return self.part if self.guardrail + ":" == EVAL_PREFIX else None

    def __reduce__(self) -> tuple[type[MetricId], tuple[str, str | None]]:
        return (MetricId, (self.guardrail, self.part))


class Cell(NamedTuple):
    """One metric in one segment (`all` pools every pair)."""

    metric: MetricId
    segment: str


class ReasonKind(StrEnum):
    """Why a verdict is what it is; the value is the reason code's fixed head."""

    NO_PAIRS = "no_pairs"
    WARMUP = "warmup"
    KILL = "kill"
    COLLAPSE = "kill:acceptance_collapse"
    # The candidate route was down (its calls skipped) beyond the policy's limit.
    CANDIDATE_DOWN = "kill:candidate_down"
    # Sampled-output parity shifted on the control slice (baseline vs baseline): the data
    # cannot be trusted (routes' settings, seeds, censoring), never a kill.
    CONTROL_PARITY = "alarm:control_parity"
    # The baseline's own tokens fail the per-token exactness test: its reports do not
    # describe its sampler (logprobs mode, end-of-sequence spelling), never a kill.
    CONTROL_EXACTNESS = "alarm:control_exactness"
    DROPPED_SHARE = "hold:dropped_share"
    COHORT_IMBALANCE = "hold:cohort_imbalance"
    MAX_DURATION = "hold:max_duration"
    LOAD_UNTESTED = "hold:load_untested"
    GAIN_PROVEN = "promote:gain_proven"
    GUARDRAILS_INSIDE = "promote:guardrails_inside"
    MIN_PAIRS = "continue:min_pairs"
    MIN_DURATION = "continue:min_duration"
    GAIN_UNPROVEN = "continue:gain_unproven"
    UNPROVEN = "continue:unproven"
    # A canary stage that samples all the traffic leaves no baseline cohort to compare with:
    # no pair test can run (continue, so that the candidate-down kill still can).
    NO_BASELINE_COHORT = "continue:no_baseline_cohort"
    # Several arms: no best-or-tied arm's own gate promotes yet (`gate.stats.arms`).
    ARM_CHOICE_OPEN = "continue:arm_choice_open"


@dataclass(frozen=True)
class Reason:
    """One reason: its kind, and the cell (kill, unproven) or segment (collapse) it names."""

    kind: ReasonKind
    cell: Cell | None = None
    segment: str | None = None

    @classmethod
    def from_code(cls, code: str) -> Reason | None:
        """Return the reason a stored code renders (the inverse of `code`); None: unknown."""
        for kind in _LONGEST_FIRST:
            if code == kind.value:
                return None if kind in _CELL_KINDS | _SEGMENT_KINDS else cls(kind)
            rest = code.removeprefix(f"{kind.value}:")
            if rest == code or not rest:
                continue
            if kind in _CELL_KINDS:
                metric, _, segment = rest.rpartition(":")
                if not metric or not segment:
                    return None
                guardrail, _, part = metric.partition(":")
                return cls(kind, Cell(MetricId(guardrail, part or None), segment))
            return cls(kind, segment=rest) if kind in _SEGMENT_KINDS else None
        return None

    @property
    def code(self) -> str:
        """Return the stable reason code (`kill:<metric>:<segment>`, `hold:dropped_share`)."""
        if self.cell is not None:
            return f"{self.kind.value}:{self.cell.metric}:{self.cell.segment}"
        if self.segment is not None:
            return f"{self.kind.value}:{self.segment}"
        return self.kind.value

    @property
    def decision_word(self) -> str:
        """Return the decision the reason belongs to (`kill`, `hold`, `continue`, ...)."""
        return self.kind.value.partition(":")[0]

    @property
    def detail(self) -> str:
        """Return the reason without its decision word, for people (`unproven:tpot:all`)."""
        head = self.kind.value.partition(":")[2] or self.kind.value
        if self.cell is not None:
            return f"{head}:{self.cell.metric}:{self.cell.segment}"
        return f"{head}:{self.segment}" if self.segment is not None else head


# What a code carries after its head: a cell (`kill:<metric>:<segment>`), or a segment or
# statistic (`kill:acceptance_collapse:<segment>`, `alarm:control_parity:<statistic>`).
_CELL_KINDS = frozenset({ReasonKind.KILL, ReasonKind.UNPROVEN})
_SEGMENT_KINDS = frozenset({ReasonKind.COLLAPSE, ReasonKind.CONTROL_PARITY})
# `kill:acceptance_collapse:chat` is a collapse, not a kill of metric `acceptance_collapse`.
_LONGEST_FIRST = sorted(ReasonKind, key=lambda kind: len(kind.value), reverse=True)
