"""One cell in words: a guardrail's name and family, its status, estimate and interval."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from gate.reports.headline.facts import Cell
from gate.stats.policy import Policy

Status = Literal["better", "inside", "unproven", "harmful", "no_data", "not_gating"]
STATUS_WORDS: dict[str, str] = {
    "better": "proven better",
    "inside": "within margin",
    "unproven": "unproven",
    "harmful": "harmful",
    "no_data": "no data",
    "not_gating": "not gating yet",
}
# One colour per status, shared by /ui (CSS) and the report (HTML).
STATUS_COLOURS: dict[str, str] = {
    "better": "#15803d",
    "inside": "#65a30d",
    "unproven": "#a16207",
    "harmful": "#b91c1c",
    "no_data": "#6b7280",
    "not_gating": "#6b7280",
}
# Signed numbers use the minus sign, not a hyphen.
MINUS = "\N{MINUS SIGN}"
RATIOS = ("tpot", "e2e", "ttft_p50")
LABELS = {
    "tpot": "TPOT",
    "e2e": "end-to-end latency",
    "ttft_p50": "TTFT",
    "ttft_tail": "TTFT tail",
    "e2e_tail": "end-to-end tail",
    "acceptance": "draft acceptance",
    "loop": "repetition loops",
    "failures": "route failures",
    "cancels": "client cancels",
    "feedback": "thumbs-down",
    "greedy_mismatch": "greedy parity",
    "exactness": "per-token exactness",
}
FAMILIES = {
    "tpot": "latency",
    "e2e": "latency",
    "ttft_p50": "latency",
    "ttft_tail": "latency",
    "e2e_tail": "latency",
    "acceptance": "acceptance",
    "loop": "acceptance",
    "failures": "failures",
    "cancels": "failures",
    "feedback": "quality",
    "greedy_mismatch": "parity",
    "exactness": "parity",
}
ROW_ORDER = ("tpot", "e2e", "ttft_p50", "ttft_tail", "e2e_tail", "acceptance")
TAIL_ORDER = ("failures", "cancels", "feedback", "greedy_mismatch", "loop")
# The answer statistics of sampled-output parity (`gate.parity.STATISTICS`), in words.
PARITY_WORDS = {
    "mean_logprob": "mean log-prob per token under the model",
    "length": "answer length",
    "distinct_2": "distinct bigrams",
}


def label(metric: str) -> str:
    """Return a guardrail's name in words."""
    if metric.startswith("eval:"):
        return metric.removeprefix("eval:").replace("_", " ")
    if metric.startswith("parity:"):
        stat = metric.removeprefix("parity:")
        return f"sampled-output parity ({PARITY_WORDS.get(stat, stat)})"
    return LABELS.get(metric, metric.replace("_", " "))


def family(metric: str) -> str:
    """Return the guardrail family of a metric."""
    if metric.startswith(("eval:", "parity:")):
        return "quality"
    return FAMILIES.get(metric, "other")


def cell_status(cell: Cell, policy: Policy) -> Status:
    """Return a cell's status: proven better, within margin, unproven, harmful or none."""
    if cell.status == "harmful":
        return "harmful"
    if cell.estimate is None or not cell.n:
        return "no_data"
    if cell.status == "idle":
        return "not_gating"
    if cell.metric == policy.primary.metric and cell.upper is not None:
        if cell.upper < 1 - policy.primary.min_gain:
            return "better"
    elif cell.metric == "acceptance":
        pass  # a floor: above it is all there is to prove
    elif cell.upper is not None and cell.upper < (1.0 if cell.metric in RATIOS else 0.0):
        return "better"
    return "inside" if cell.status == "inside" else "unproven"


def format_estimate(cell: Cell) -> str:
    """Return a cell's estimate in words a person reads: `-38 %`, `+1.2 pts`, `62 %`."""
    if cell.estimate is None:
        return "no data"
    return format_value(cell.metric, cell.estimate)


def format_interval(cell: Cell) -> str:
    """Return a cell's interval as `low to high` on the estimate's scale."""
    if cell.estimate is None:
        return ""
    low = f"{MINUS}∞" if cell.lower is None else format_value(cell.metric, cell.lower)
    high = "+∞" if cell.upper is None else format_value(cell.metric, cell.upper)
    if cell.metric == "acceptance":  # no unbounded side: 0 and 1 bound it
        low = format_value(cell.metric, max(0.0, cell.lower or 0.0))
        high = format_value(cell.metric, min(1.0, 1.0 if cell.upper is None else cell.upper))
    return f"{low} to {high}"


def format_value(metric: str, value: float) -> str:
    if metric.startswith("parity:"):  # d in standard deviations of d (warm-up)
        return _signed(value, " sd")
    if metric == "exactness":  # per-token total variation
        return f"TV {value:.3f}"
    if metric in RATIOS:
        return _signed(100 * (value - 1), " %")
    if metric == "acceptance":
        return f"{100 * value:.0f} %"
    return _signed(100 * value, " pts")


def _signed(value: float, unit: str) -> str:
    digits = 0 if abs(value) >= 10 or unit == " %" else 1
    text = f"{abs(value):.{digits}f}"
    if float(text) == 0:
        return f"0{unit}" if digits == 0 else f"{text}{unit}"
    return f"{MINUS if value < 0 else '+'}{text}{unit}"


def ordered(cells: Iterable[Cell]) -> list[Cell]:
    def rank(cell: Cell) -> tuple[int, str]:
        if cell.metric in ROW_ORDER:
            return (ROW_ORDER.index(cell.metric), "")
        if cell.metric.startswith("eval:"):
            return (len(ROW_ORDER), cell.metric)
        tail = TAIL_ORDER.index(cell.metric) if cell.metric in TAIL_ORDER else len(TAIL_ORDER)
        return (len(ROW_ORDER) + 1 + tail, cell.metric)

    return sorted(cells, key=rank)
