"""A rehearsal with several candidate arms: each arm's own summary against the shared
baseline, which arm is best per level and segment, and the one exit code.

Every arm is swept in the same levels, on the same workload, in alternating blocks with
the baseline (`gate.rehearse.sweep`), so each arm's speedup is paired to the baseline by
request exactly as a single candidate's is. Two arms are compared the same way: they
replayed the same requests, so the leader's seconds per token are paired by request with
the runner-up's and the ratio gets its own bootstrap interval (the baseline cancels out
of the ratio of the two speedups). The leader is declared only when that interval
excludes 1; otherwise the level is a tie between them.

An arm that failed the exactness test is not usable: it is reported with its result and
never named best. The exit code answers "is there an arm to deploy?": 0 when a usable
arm pays at --at, 1 when every usable arm is proven not to pay there, 2 when it cannot
tell, 3 only when no arm is usable (every arm not exact). A lossy arm next to a good one
is a finding of the report, not a reason to block the good one: the rollout that follows
simply leaves it out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gate.rehearse.analysis import ALL, RehearsalAnswer, fails_more, speedup
from gate.rehearse.runner import Route
from gate.rehearse.sweep import Level


@dataclass(frozen=True)
class ArmResult:
    """One arm's summary (the single-candidate document) and its exit code alone."""

    route: Route
    summary: dict[str, Any]
    code: int

    @property
    def usable(self) -> bool:
        """Return whether the arm passed (or skipped) the exactness test."""
        return not (self.summary.get("exactness") or {}).get("failed", False)


def answer(arms: list[ArmResult]) -> RehearsalAnswer | None:
    """Return the rehearsal's answer over its usable arms (see the module docstring);
    None when no arm is usable."""
    codes = [arm.code for arm in arms if arm.usable]
    if not codes:
        return None
    if RehearsalAnswer.PAYS in codes:
        return RehearsalAnswer.PAYS
    if all(code == RehearsalAnswer.DOES_NOT_PAY for code in codes):
        return RehearsalAnswer.DOES_NOT_PAY
    return RehearsalAnswer.CANNOT_TELL


def best(
    baseline: Route, arms: list[ArmResult], levels: list[Level], segments: list[str]
) -> dict[str, list[dict[str, Any]]]:
    """Return, per segment and level, the usable arm with the best speedup and whether it
    is proven faster than the runner-up (`leads`) or tied with it (`tied`). An arm that
    failed a larger share of its requests than the baseline there is not ranked, as it
    would not win there alone (`analysis.level_call`)."""
    usable = [arm for arm in arms if arm.usable]
    return {
        segment: [_best_at(baseline, usable, level, segment) for level in levels]
        for segment in segments
    }


def _best_at(baseline: Route, arms: list[ArmResult], level: Level, segment: str) -> dict[str, Any]:
    def samples(route: Route) -> list[Any]:
        return [s for s in level.samples(route.name) if segment in (ALL, s.segment)]

    base = samples(baseline)
    # An arm failing a larger share than the baseline is fast only on the answers it gave.
    ranked = sorted(
        ((value.estimate, arm.route) for arm in arms
         if not fails_more(base, samples(arm.route))
         and (value := speedup(base, samples(arm.route))) is not None),
        key=lambda found: -found[0],
    )  # fmt: skip
    cell: dict[str, Any] = {"concurrency": level.concurrency, "arm": None, "call": None}
    if not ranked:
        return cell
    (top, leader), rest = ranked[0], ranked[1:]
    cell.update(arm=leader.name, speedup=round(top, 4), call="only")
    if rest:
        runner = rest[0][1]
        # The leader's speed over the runner-up's, paired by request (> 1: leader faster).
        margin = speedup(samples(runner), samples(leader))
        cell.update(runner_up=runner.name, call="unclear")
        if margin is not None:
            cell["over_runner_up"] = [round(margin.low, 4), round(margin.high, 4)]
            cell["call"] = "leads" if margin.low > 1 else "tied"
    return cell


def combine(
    baseline: Route, arms: list[ArmResult], levels: list[Level], lead_level: int
) -> dict[str, Any]:
    """Return the several-arm summary: the leading arm's document at the top (what a
    single-candidate reader reads, the recorded crossover included), every arm's under
    `arms`, and the best arm per segment and level under `best`."""
    segments = list(arms[0].summary["crossover"])
    found = best(baseline, arms, levels, segments)
    lead = _lead(arms, found[ALL], lead_level)
    top = dict(lead.summary)
    top["decision"] = _words(answer(arms), top["at"])
    top["lead"] = lead.route.name
    top["arms"] = [
        {
            "name": arm.route.name,
            "url": arm.route.base_url,
            "usable": arm.usable,
            "decision": arm.summary["decision"],
            "levels": arm.summary["levels"],
            "crossover": arm.summary["crossover"],
            "exactness": arm.summary.get("exactness"),
            "interval_alpha": arm.summary["interval_alpha"],
        }
        for arm in arms
    ]
    top["best"] = found
    return top


def _lead(arms: list[ArmResult], cells: list[dict[str, Any]], concurrency: int) -> ArmResult:
    """Return the arm best at `concurrency` in segment `all`, else the first usable arm,
    else the first arm."""
    named = next((c["arm"] for c in cells if c["concurrency"] == concurrency), None)
    by_name = {arm.route.name: arm for arm in arms}
    if named in by_name:
        return by_name[named]
    return next((arm for arm in arms if arm.usable), arms[0])


def lead_level(levels: list[int], at: int) -> int:
    """Return the swept level the lead arm is chosen at: the nearest at or above --at,
    else (no --at, or --at above the sweep) the highest level swept."""
    above = [level for level in levels if at and level >= at]
    return above[0] if above else levels[-1]


def _words(found: RehearsalAnswer | None, at: int | None) -> str:
    if found is None:
        return "no arm is exact"
    if not at:
        return "no --at given"
    return {RehearsalAnswer.PAYS: "pays", RehearsalAnswer.DOES_NOT_PAY: "does not pay"}.get(
        found, "could not tell"
    )


def lines(summary: dict[str, Any]) -> list[str]:
    """Return the several-arm result in words: each arm, then the best arm per segment."""
    out = []
    for arm in summary["arms"]:
        state = "" if arm["usable"] else " (not exact: never chosen)"
        out.append(f"arm {arm['name']}: crossover {arm['crossover'][ALL]['text']}; "
                   f"{arm['decision']}{state}")  # fmt: skip
    for segment, cells in summary["best"].items():
        shown = [cell_words(cell) for cell in cells]
        out.append(f"best arm, {segment}: " + "; ".join(shown))
    out.append(f"lead arm: {summary['lead']}")
    return out


def cell_words(cell: dict[str, Any]) -> str:
    """Return one level's best arm in words: "at 2 k4 (1.28x, ahead of k2)"."""
    where = f"at {cell['concurrency']}"
    if cell["arm"] is None:
        return f"{where} none measured"
    if cell["call"] == "leads":
        return f"{where} {cell['arm']} ({cell['speedup']:.2f}x, ahead of {cell['runner_up']})"
    if cell["call"] == "only":
        return f"{where} {cell['arm']} ({cell['speedup']:.2f}x, the only arm ranked)"
    return f"{where} {cell['arm']} tied with {cell['runner_up']} ({cell['speedup']:.2f}x)"
