"""A recorded rehearsal (`specgate rehearse --rollout`) in words: when, what, and its answer."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gate.rehearse.analysis import ALPHA, confidence
from gate.stats.policy import ALL

REHEARSAL_HEADERS = ["segment", "concurrency", "speedup [95 % interval]", "call"]
REHEARSAL_TITLE = "Rehearsal before rollout: speedup (baseline / candidate) vs concurrency"
NO_REHEARSAL = "No rehearsal recorded for this rollout (`specgate rehearse --rollout ID`)."
# `specgate rehearse`'s decision at --at, as a sentence's end.
ANSWER_WORDS = {
    "pays": "speculation pays",
    "does not pay": "speculation does not pay",
    "could not tell": "the sweep could not tell",
}
CALL_WORDS = {
    "wins": "candidate faster",
    "loses": "candidate slower",
    "unclear": "could not tell",
}


def rehearsal_sentence(
    *, run_at: datetime | None, recorded_at: datetime, routes: tuple[str, str], workload: str,
    requests: int, levels: list[int], arms: list[str] | None = None, lead: str | None = None,
) -> str:  # fmt: skip
    """Say when a rehearsal ran, against which routes (or arms) and workload, over which
    sweep."""
    when = f"Rehearsed {_when(run_at)}" if run_at else f"Recorded {_when(recorded_at)}"
    sweep = f"{levels[0]} to {levels[-1]}" if len(levels) > 1 else str(levels[0])
    against = (
        f"{len(arms)} arms ({', '.join(arms)}, lead {lead})" if arms else f"candidate {routes[1]}"
    )
    return (
        f"{when}: baseline {routes[0]} against {against}, workload {workload} "
        f"({requests:,} requests), {sweep} concurrent requests."
    )


def rehearsal_headers(alpha: float) -> list[str]:
    """Return the rehearsal table's headers, its intervals at `alpha`."""
    return [*REHEARSAL_HEADERS[:2], f"speedup [{confidence(alpha)} interval]", REHEARSAL_HEADERS[3]]


def arms_note(alphas: list[float]) -> str:
    """Say at what confidence K arms' intervals were drawn, as the rehearsal recorded it.

    Since arms carry their alpha, each is judged at 0.05 / K (Bonferroni); an arm recorded
    before that carries none and was judged at 0.05, uncorrected, which the note says.
    """
    k = len(alphas)
    head = f"{k} arms against the same baseline"
    if all(abs(a - ALPHA / k) <= 1e-9 for a in alphas):
        return (
            f"{head}, each arm's intervals at {confidence(alphas[0])} "
            f"(alpha {alphas[0]:.3g} = {ALPHA} / {k}, Bonferroni)."
        )
    if len(set(alphas)) == 1:
        return (
            f"{head}, each arm's intervals at {confidence(alphas[0])} (alpha {alphas[0]:.3g}, "
            f"not corrected for {k} arms: one may read as paying by chance)."
        )
    shown = ", ".join(confidence(a) for a in alphas)
    return f"{head}, the arms' intervals at {shown} as recorded (not one correction for {k} arms)."


def arm_exactness(section: dict[str, Any] | None) -> tuple[str, str]:
    """Return an arm's exactness test result in a word or two, and in full (`specgate
    rehearse`'s `exactness` section; None: the test was not run)."""
    if not section:
        return "not tested", "the exactness test was not run (--exactness-requests 0)"
    cand = section["candidate"]
    full = f"{cand['text']}; {section['greedy_parity']['text']}"
    if section["control_alarm"]:
        return "not judged", f"the baseline fails the same test (data quality): {full}"
    tv = cand.get("tv")
    if section["failed"]:
        short = "not exact" + (f": TV {tv[0]:.2f} [{tv[1]:.2f}, {tv[2]:.2f}]" if tv else "")
        return short, f"{full}; never chosen"
    if section["lossy"] and cand["status"] == "deviates":
        return "declared lossy", full
    return str(cand["status"]), full


def arms_answer(at: int | None, paying: list[str], not_exact: list[str]) -> str:
    """Say which arms pay at the production concurrency and which can never be chosen."""
    pays = f"Arms that pay at {at}: {', '.join(paying) or 'none'}" if at else "No --at given"
    return f"{pays}; not exact, never chosen: {', '.join(not_exact) or 'none'}."


def rehearsal_crossover(segment: str, text: str) -> str:
    """Say where the candidate stops winning in one segment (the sweep's own words)."""
    name = "all segments" if segment == ALL else segment
    return f"Crossover, {name}: {text}."


def rehearsal_answer(at: int | None, decision: str, top: int) -> str:
    """Say what the rehearsal answers at the production concurrency (`--at`)."""
    if at is None:
        return "No production concurrency (--at) was given: the rehearsal answers for none."
    beyond = f" ({at} is above the sweep's {top})" if at > top else ""
    return f"At production concurrency {at}: {ANSWER_WORDS.get(decision, decision)}{beyond}."


def rehearsal_speedup(speedup: float | None, interval: tuple[float, float] | None) -> str:
    """Return a level's speedup as people read it: "1.31 [1.12, 1.52]"."""
    if speedup is None or interval is None:
        return "too few answers"
    return f"{speedup:.2f} [{interval[0]:.2f}, {interval[1]:.2f}]"


def call_words(call: str | None) -> str:
    """Return a level's call in words."""
    return CALL_WORDS.get(call or "", "too few answers")


def _when(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
