"""One verdict: decision, reason codes, human summary and the per-cell table."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np

from gate.db.enums import Decision
from gate.parity import explain
from gate.stats import exactness
from gate.stats.betting import diff_interval
from gate.stats.cell_checks import cell_n, harm_interval
from gate.stats.gate_stats import GateStats
from gate.stats.ids import ALL, Cell, Reason, ReasonKind
from gate.stats.load_gap import band_intervals, load_gap
from gate.stats.policy import Policy
from gate.stats.registry import Family, Harm, Rule, Source, find, metric_id, rule_for
from gate.stats.rule import Code, LookFlags, apply_rule
from gate.stats.sequences import CohortCounts, Interval, MeanStats, PairedCounts, TwoMeans

Key = tuple[str, str]

Status = Literal["harmful", "inside", "unproven", "idle"]
DECISIONS = {
    Code.CONTINUE: Decision.CONTINUE,
    Code.PROMOTE: Decision.PROMOTE,
    Code.KILL: Decision.KILL,
    Code.HOLD: Decision.HOLD,
}


@dataclass(frozen=True)
class CellResult:
    """One metric x segment: estimate and interval on the metric's natural scale.

    Latency metrics read as candidate/baseline ratios, rates as candidate minus baseline
    rate, acceptance as the mean per-request acceptance. `lower` is at the kill level and
    `upper` at the promotion level (swapped for acceptance, where low is harmful).
    """

    metric: str
    segment: str
    estimate: float | None
    lower: float
    upper: float
    n: int
    kill_at: float
    margin: float
    status: Status


@dataclass(frozen=True)
class BandResult:
    """One load band: the primary ratio with its interval (both bounds at alpha_promote),
    the candidate's mean running requests it was measured at, and the baseline's then."""

    band: str
    ratio: float | None
    lower: float
    upper: float
    n: int
    candidate_load: float | None
    baseline_load: float | None
    proven: bool


@dataclass(frozen=True)
class VerdictResult:
    """The gate's verdict on one stage."""

    decision: Decision
    reason_codes: tuple[str, ...]
    summary: str
    cells: tuple[CellResult, ...]
    n_pairs: int
    # The primary gain per band of the candidate's load (empty: no loads recorded).
    bands: tuple[BandResult, ...] = ()
    # Episodes among the tested pairs (None: no pair names its episode; stated in `summary`).
    n_episodes: int | None = None
    # Pairs past the warm-up left out as not load-matched (`policy.load_tolerance`).
    unmatched: int = 0

    def estimates(self) -> list[dict[str, Any]]:
        """Return the per-cell table as JSON-ready dicts (for the verdicts table)."""
        return [_json_ready(asdict(cell)) for cell in self.cells]

    def band_rows(self) -> list[dict[str, Any]]:
        """Return the load bands as JSON-ready dicts (for the verdicts table)."""
        return [_json_ready(asdict(band)) for band in self.bands]


NO_PAIRS = VerdictResult(
    decision=Decision.CONTINUE,
    reason_codes=("no_pairs",),
    summary="continue: no evaluated pairs in this stage yet",
    cells=(),
    n_pairs=0,
)
NO_BASELINE_COHORT = VerdictResult(
    decision=Decision.CONTINUE,
    reason_codes=(ReasonKind.NO_BASELINE_COHORT.value,),
    summary="continue: this canary stage samples all the traffic, so no baseline cohort is"
    " left to compare with; no pair test runs (lower the sample rate)",
    cells=(),
    n_pairs=0,
)


def decide(policy: Policy, stats: GateStats) -> VerdictResult:
    """Decide one look: continue, promote, kill or hold, with reasons and estimates."""
    ev = apply_rule(policy, stats)
    code = Code(int(np.asarray(ev.code)))
    intervals = _intervals(policy, stats, ev)
    cells = tuple(_cell_result(policy, stats, ev, key, intervals[key]) for key in sorted(ev.inside))
    reasons = reasons_of(policy, stats, ev, code)
    alarms = [_alarm(k[0]) for k, flag in sorted(ev.alarms.items()) if _flag(flag)]
    episodes = None if stats.n_episodes is None else int(np.asarray(stats.n_episodes))
    return VerdictResult(
        decision=DECISIONS[code],
        reason_codes=tuple(r.code for r in [*reasons, *alarms]),
        summary=_summary(code, reasons, cells, int(np.asarray(stats.n_pairs)), episodes)
        + _load_words(policy, stats, reasons)
        + _data_quality(int(np.asarray(stats.n_dropped)))
        + _unmatched_words(policy, int(np.asarray(stats.n_unmatched)))
        + _control_alarm(alarms),
        cells=cells,
        n_pairs=int(np.asarray(stats.n_pairs)),
        bands=band_results(policy, stats),
        n_episodes=episodes,
        unmatched=int(np.asarray(stats.n_unmatched)),
    )


def band_results(policy: Policy, stats: GateStats) -> tuple[BandResult, ...]:
    """Return the load bands with pairs, lowest load first."""
    b = stats.bands
    if b is None:
        return ()
    goal = math.log1p(-policy.primary.min_gain)
    out = []
    for label, g, cand, base, got in zip(
        b.labels, b.gain, b.candidate_load, b.baseline_load, band_intervals(policy, b),
        strict=True,
    ):  # fmt: skip
        n = int(np.asarray(g.n))
        if not n:
            continue
        est, lo, hi = (float(np.asarray(v)) for v in (got.estimate, got.lower, got.upper))
        out.append(
            BandResult(
                band=label,
                ratio=math.exp(est),
                lower=math.exp(lo),
                upper=math.exp(hi),
                n=n,
                candidate_load=float(np.asarray(cand)) / n,
                baseline_load=float(np.asarray(base)) / n,
                proven=hi < goal,
            )
        )
    return tuple(out)


def _load_words(policy: Policy, stats: GateStats, reasons: list[Reason]) -> str:
    if not any(r.kind is ReasonKind.LOAD_UNTESTED for r in reasons):
        return ""
    gap = load_gap(policy, stats)
    proven, target = (float(np.asarray(v)) for v in (gap.proven_load, gap.target))
    return (
        f" Load: the gain is proven up to {proven:.1f} running requests on the candidate;"
        f" promoting it brings about {target:.1f}. Gather evidence nearer that load (mirror"
        " more traffic: a higher sample_rate or a stage in between; canary mode) or set"
        " guardrails.load_bands.hold_untested_load: false."
    )


def _flag(value: Any) -> bool:
    return bool(np.asarray(value))


def _cell(key: tuple[str, str]) -> Cell:
    return Cell(metric_id(key[0]), key[1])


def reasons_of(policy: Policy, stats: GateStats, ev: LookFlags, code: Code) -> list[Reason]:
    """Return why the look decided `code`, as typed reasons (rendered by `Reason.code`)."""
    if not _flag(stats.warmed_up):
        return [Reason(ReasonKind.WARMUP)]
    if code is Code.KILL:
        harm = [
            Reason(ReasonKind.KILL, _cell(k))
            for k, flag in sorted(ev.harmful.items())
            if _flag(flag)
        ]
        collapse = [
            Reason(ReasonKind.COLLAPSE, segment=s) for s, f in ev.collapsed.items() if _flag(f)
        ]
        return harm + collapse
    if code is Code.HOLD and (_flag(ev.untrusted_drops) or _flag(ev.imbalanced)):
        return [
            Reason(kind)
            for kind, flag in (
                (ReasonKind.DROPPED_SHARE, ev.untrusted_drops),
                (ReasonKind.COHORT_IMBALANCE, ev.imbalanced),
            )
            if _flag(flag)
        ]
    if code is Code.PROMOTE:
        return [Reason(ReasonKind.GAIN_PROVEN), Reason(ReasonKind.GUARDRAILS_INSIDE)]
    if code is Code.HOLD and _flag(ev.untested_load):
        return [Reason(ReasonKind.LOAD_UNTESTED)]
    pending = []
    if int(np.asarray(stats.n_pairs)) < policy.min_pairs:
        pending.append(Reason(ReasonKind.MIN_PAIRS))
    if float(np.asarray(stats.elapsed_s)) < policy.min_duration_s:
        pending.append(Reason(ReasonKind.MIN_DURATION))
    if not _flag(ev.gain):
        pending.append(Reason(ReasonKind.GAIN_UNPROVEN))
    pending += [
        Reason(ReasonKind.UNPROVEN, _cell(key))
        for key, flag in sorted(ev.inside.items())
        if _flag(ev.binding[key]) and not _flag(flag)
    ]
    return ([Reason(ReasonKind.MAX_DURATION)] if code is Code.HOLD else []) + pending


def _intervals(policy: Policy, stats: GateStats, ev: LookFlags) -> dict[Key, Interval]:
    """Return every cell's harm interval; count cells are bisected together, in one batch."""
    out: dict[Key, Interval] = {}
    batches: dict[float | None, list[Key]] = defaultdict(list)
    for key in ev.inside:
        cell, rule = stats.cells[key], rule_for(policy, *key)
        assert rule is not None  # evaluate() only keeps cells with a rule
        # Episode cells also need their clustered interval: not batched.
        if type(cell) in (PairedCounts, CohortCounts):
            assert isinstance(cell, PairedCounts | CohortCounts)
            batches[cell.share if isinstance(cell, CohortCounts) else None].append(key)
            continue
        out[key] = harm_interval(
            cell, rule, alpha_kill=ev.alpha_kill_each, alpha_promote=policy.alpha_promote,
            n_opt=policy.n_opt(key[1]),
        )  # fmt: skip
    for share, keys in batches.items():
        cells = [stats.cells[k] for k in keys]
        columns = [
            np.array([float(np.asarray(getattr(c, name))) for c in cells])
            for name in (
                ("n", "worse", "better") if share is None else ("n", "candidate", "baseline")
            )
        ]
        stacked: PairedCounts | CohortCounts = (
            PairedCounts(columns[0], columns[1], columns[2])
            if share is None
            else CohortCounts(columns[0], columns[1], columns[2], share)
        )
        got = diff_interval(
            stacked, alpha_lower=ev.alpha_kill_each, alpha_upper=policy.alpha_promote
        )
        for i, key in enumerate(keys):
            out[key] = Interval(
                *(float(np.asarray(v)[i]) for v in (got.estimate, got.lower, got.upper))
            )
    return out


def _cell_result(
    policy: Policy, stats: GateStats, ev: LookFlags, key: Key, got: Interval
) -> CellResult:
    metric, segment = key
    rule = rule_for(policy, metric, segment)
    assert rule is not None  # evaluate() only keeps cells with a rule
    cell = stats.cells[key]
    status: Status = "idle"
    if _flag(ev.harmful[key]):
        status = "harmful"
    elif _flag(ev.binding[key]):
        status = "inside" if _flag(ev.inside[key]) else "unproven"
    est, lo, hi = (float(np.asarray(v)) for v in (got.estimate, got.lower, got.upper))
    kill_at, margin = rule.kill_at, rule.margin
    if rule.floor is not None:
        est, lo, hi = rule.floor - est, rule.floor - hi, rule.floor - lo
        kill_at = margin = rule.floor
    elif _is_ratio(cell, rule):
        est, lo, hi, kill_at, margin = (math.exp(v) for v in (est, lo, hi, kill_at, margin))
    return CellResult(
        metric=metric,
        segment=segment,
        estimate=None if math.isnan(est) else est,
        lower=lo,
        upper=hi,
        n=int(cell_n(cell)),
        kill_at=kill_at,
        margin=margin,
        status=status,
    )


def _is_ratio(cell: object, rule: Rule) -> bool:
    return isinstance(cell, MeanStats | TwoMeans) and rule.floor is None and not rule.two_sided


def _describe(cell: CellResult) -> str:
    g = find(metric_id(cell.metric))
    if g is not None and g.shadow is Family.MEAN_FLOOR:
        return f"{g.id} {cell.estimate:.2f} (floor {cell.kill_at:.2f})"
    if cell.estimate is None:
        return f"{cell.metric} no data"
    if g is not None and g.source is Source.EXACTNESS:
        words = exactness.explain(cell.estimate, cell.lower, cell.upper)
        return f"{words} (margin {cell.kill_at:.3f})"
    if g is not None and g.harm is Harm.EITHER:
        # Sampled-output parity: which statistic moved, which way, in sd of d.
        part = metric_id(cell.metric).part or cell.metric
        way = 1 if cell.estimate > 0 else -1
        return (
            f"{explain(part, way)} ({part} shift {cell.estimate:+.2f} sd "
            f"[{cell.lower:+.2f}, {cell.upper:+.2f}], margin {cell.margin:.2f})"
        )
    if cell.kill_at > 0 and g is not None and g.ratio:
        return f"{cell.metric} ratio {cell.estimate:.3f} [{cell.lower:.3f}, {cell.upper:.3f}]"
    points = [100 * v for v in (cell.estimate, cell.lower, cell.upper)]
    return f"{cell.metric} {points[0]:+.2f} pts [{points[1]:+.2f}, {points[2]:+.2f}]"


def _killed_by(reason: Reason, by_cell: dict[tuple[str, str], CellResult]) -> str:
    if reason.cell is None:
        return f"acceptance collapse in {reason.segment}"
    cell = by_cell.get(reason.cell)
    if cell is None:
        return f"{reason.cell.metric} in {reason.cell.segment}"
    return f"{_describe(cell)} in {reason.cell.segment}"


def _summary(
    code: Code,
    reasons: list[Reason],
    cells: tuple[CellResult, ...],
    n: int,
    episodes: int | None = None,
) -> str:
    by_cell = {(c.metric, c.segment): c for c in cells}
    head = f"{DECISIONS[code].value.upper()} on {n:,} tested pairs"
    if episodes is not None:
        head += f" in {episodes:,} episodes"
    if [r.kind for r in reasons] == [ReasonKind.WARMUP]:
        return f"{head}: warming up; no test runs until warm-up ends."
    if code is Code.KILL:
        return f"{head}: proven harm: " + "; ".join(_killed_by(r, by_cell) for r in reasons) + "."
    if code is Code.PROMOTE:
        shown = [c for c in cells if c.segment == ALL and c.status == "inside"]
        return (
            f"{head}: gain proven and every guardrail inside its margin ("
            + "; ".join(_describe(c) for c in shown)
            + ")."
        )
    waiting = [r.detail for r in reasons if r.decision_word == "continue"]
    holds = [r.detail for r in reasons if r.decision_word == "hold"]
    text = head
    if holds:
        text += ": held (" + ", ".join(h.replace("_", " ") for h in holds) + ")"
    if waiting:
        shown_waiting = waiting[:6] + ([f"{len(waiting) - 6} more"] if len(waiting) > 6 else [])
        text += "; waiting on " + ", ".join(shown_waiting)
    return text + "."


def _data_quality(dropped: int) -> str:
    # Pairs no route is answerable for (dropped by the gateway's bounds, cancelled by the
    # client) are left out of every guardrail; the line says how many.
    if not dropped:
        return ""
    return f" Data quality: {dropped:,} pair(s) not attributable (dropped or cancelled), left out."


def _unmatched_words(policy: Policy, unmatched: int) -> str:
    # Promoted and routed by load, the two calls of a pair meet the loads the routing gave
    # each route; only pairs whose loads are known and close are judged.
    if not unmatched:
        return ""
    return (
        f" Routed by load: {unmatched:,} pair(s) not load-matched (the routes' running"
        f" requests more than {policy.promotion.load_match:g} apart, or not recorded), left out."
    )


def _alarm(metric: str) -> Reason:
    if metric_id(metric).guardrail == "exactness":
        return Reason(ReasonKind.CONTROL_EXACTNESS)
    return Reason(ReasonKind.CONTROL_PARITY, segment=metric_id(metric).part)


def _control_alarm(alarms: list[Reason]) -> str:
    # Baseline against baseline must stay null: a shift there means the pairs are not
    # independent draws under identical settings, so no parity result can be trusted.
    exact = [r for r in alarms if r.kind is ReasonKind.CONTROL_EXACTNESS]
    alarms = [r for r in alarms if r.kind is ReasonKind.CONTROL_PARITY]
    words = (
        " Data-quality alarm: the baseline's own tokens fail the per-token exactness test;"
        " check `logprobs_mode` and that the engine reports every token. Not a kill."
        if exact
        else ""
    )
    if not alarms:
        return words
    stats = ", ".join(str(r.segment) for r in alarms)
    return words + (
        f" Data-quality alarm: the control slice (baseline vs baseline) shows a sampled-output"
        f" shift ({stats}); check that both routes share settings, seeds vary and neither"
        f" side is cut by a limit. Not a kill."
    )


def _json_ready(row: dict[str, Any]) -> dict[str, Any]:
    # JSON has no infinities: an unbounded side is null.
    return {
        k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()
    }
