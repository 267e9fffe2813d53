"""`specgate gate advise`: recommend num_speculative_tokens from an engine's counters, and
propose arms (draft lengths, with their engine flags) to add to a rollout."""

from __future__ import annotations

import json
import shlex
from collections import defaultdict
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from rich.table import Table

from collectors import scraper
from gate.engines.spec import NgramConfig
from gate.errors import BadRequest
from gate.stats.advisor import Advice, PositionAcceptance, StepEstimate, advise, propose, rate_pick

# The exposed names the advice reads: those the scraper maps to these canonical counters.
_READ = (scraper.SPEC_DRAFTS, scraper.SPEC_ACCEPTED_PER_POS)
EXPOSED = sorted(name for name, src in scraper.SOURCES.items() if src.canonical in _READ)
# Generated tokens (vLLM's and `specgate engine`'s); with the accepted drafts they give every
# verify step, those that drafted nothing included. Read here only: the collector has no use.
GENERATED = "vllm:generation_tokens_total"


def position_acceptance(exposition: str) -> PositionAcceptance:
    """Sum the draft and per-position accepted counters over engines and models."""
    counters = scraper.parse(exposition).counters
    drafts = counters.get((scraper.SPEC_DRAFTS, ()), 0.0)
    by_position: dict[int, float] = defaultdict(float)
    for (name, labels), value in counters.items():
        if name == scraper.SPEC_ACCEPTED_PER_POS:
            by_position[int(dict(labels).get("position", "0"))] += value
    if drafts <= 0 or not by_position:
        raise BadRequest(
            f"no speculative counters ({', '.join(EXPOSED)}) in the exposition: is the "
            "engine speculating, and has it served requests?"
        )
    accepted = tuple(int(by_position[p]) for p in sorted(by_position))
    accepted_total = counters.get((scraper.SPEC_ACCEPTED_TOKENS, ()), None)
    finished = sum(v for (name, _), v in counters.items() if name == "requests_finished")
    steps = _steps(exposition, accepted_total, finished)
    return PositionAcceptance(drafts=int(drafts), accepted=accepted, steps=steps)


def _steps(exposition: str, accepted: float | None, requests: float) -> int | None:
    """Return every verify step, None when the generated tokens are not exposed.

    A decode step emits its accepted drafts plus one target token, and each request's first
    token comes from prefill, not from a verify step: steps = generated - accepted -
    requests (requests still running count their prefill token as a step, a small bias
    towards empty steps while the engine is busy).
    """
    generated = [
        sample.value
        for family in text_string_to_metric_families(exposition)
        for sample in family.samples
        if sample.name == GENERATED
    ]
    if not generated or accepted is None:
        return None
    return int(sum(generated) - accepted - requests)


def advise_command(
    metrics: Annotated[
        str, typer.Option("--metrics", help="An engine's /metrics URL or a saved scrape.")
    ],
    cost_ratio: Annotated[
        float, typer.Option(min=0.0, help="Draft pass time over target pass time (0 for n-gram).")
    ] = 0.0,
    verify_cost: Annotated[
        float, typer.Option(min=0.0, help="Extra target cost per verified token, in steps.")
    ] = 0.0,
    max_k: Annotated[int, typer.Option(min=1, max=64, help="Largest k considered.")] = 8,
    arms: Annotated[int, typer.Option(min=0, max=8, help="Arms to propose (0: none).")] = 3,
    engine: Annotated[
        str, typer.Option(help="Name the arms' flags for 'vllm' or 'llamacpp' (specgate engine).")
    ] = "vllm",
    lookup: Annotated[
        int, typer.Option(min=1, help="The measured n-gram lookup n (prompt_lookup_max).")
    ] = 3,
    rollout: Annotated[
        int, typer.Option(min=0, help="Print `specgate rollout add-arm` lines for it (0: no).")
    ] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the advice as JSON.")] = False,
) -> None:
    """Recommend num_speculative_tokens from per-position acceptance (vLLM counters), and
    propose n-gram arms to add: the draft lengths besides the measured one that beat plain
    decoding, ranked by modelled speedup (the acceptance length, tokens per verify step, over
    the step's cost), never by acceptance rate, each named with its engine flags. Verify
    steps that drafted nothing are priced as plain steps when the exposition carries the
    generated tokens."""
    if engine not in ("vllm", "llamacpp"):
        raise BadRequest(f"--engine must be 'vllm' or 'llamacpp', not {engine!r}")
    stats = position_acceptance(_read(metrics))
    advice = advise(stats, cost_ratio=cost_ratio, verify_cost=verify_cost, max_k=max_k)
    current = len(stats.accepted)  # vLLM exposes one position per drafted token
    found = [_proposal(o, engine, lookup, rollout) for o in
             (propose(advice, current_k=current, count=arms) if arms else ())]  # fmt: skip
    if as_json:
        typer.echo(json.dumps(_document(advice, current, found), indent=2))
        return
    _print(advice, current, found)


def _proposal(option: StepEstimate, engine: str, lookup: int, rollout: int) -> dict[str, Any]:
    """Return one proposed arm: its name, numbers, engine flags and why."""
    n = min(lookup, option.k) if engine == "llamacpp" else lookup
    spec = NgramConfig(option.k, prompt_lookup_min=min(n, lookup), prompt_lookup_max=n)
    name = f"ngram-k{option.k}"
    why = (f"{option.tokens_per_step:.2f} tokens per verify step, {option.speedup:.2f}x "
           f"modelled")  # fmt: skip
    if option.extrapolated:
        why += ", extrapolated beyond the measured positions"
    if n < lookup:
        why += (f"; lookup n lowered to {n}: llama.cpp drafts nothing when k < n (the lower n "
                "matches more often, which the counters do not price)")  # fmt: skip
    found: dict[str, Any] = {
        "name": name, "k": option.k, "prompt_lookup_max": n,
        "tokens_per_step": round(option.tokens_per_step, 4),
        "acceptance_rate": round(option.acceptance_rate, 4),
        "speedup": round(option.speedup, 4), "extrapolated": option.extrapolated,
        "flags": _flags(spec, engine), "why": why,
    }  # fmt: skip
    if rollout:
        reason = f"gate advise: {option.tokens_per_step:.2f} tokens per verify step"
        found["add_arm"] = shlex.join(["specgate", "rollout", "add-arm", str(rollout), "--name",
                                       name, "--route", name, "--reason", reason])  # fmt: skip
    return found


def _flags(spec: NgramConfig, engine: str) -> str:
    if engine == "vllm":
        described = json.dumps(spec.describe(), separators=(",", ":"))
        return f"--speculative-config {shlex.quote(described)}"
    return shlex.join([
        "specgate", "engine", "--backend", "llamacpp", "--speculative", "ngram",
        "--num-speculative-tokens", str(spec.num_speculative_tokens),
        "--prompt-lookup-min", str(spec.prompt_lookup_min),
        "--prompt-lookup-max", str(spec.prompt_lookup_max),
    ])  # fmt: skip


def _trap(advice: Advice) -> str:
    picked = rate_pick(advice)
    if advice.recommended_k in (0, picked):
        return ""
    return (f"ranked by acceptance length: ranking by acceptance rate would pick k={picked}, "
            "since the rate's denominator grows with k")  # fmt: skip


def _document(advice: Advice, current: int, proposals: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "recommended_k": advice.recommended_k, "speedup": round(advice.speedup, 4),
        "measured_k": current, "draft_share": round(advice.draft_share, 4),
        "summary": advice.summary, "note": _trap(advice),
        "options": [{"k": o.k, "accepted_per_step": round(o.expected_accepted, 4),
                     "tokens_per_step": round(o.tokens_per_step, 4),
                     "acceptance_rate": round(o.acceptance_rate, 4),
                     "speedup": round(o.speedup, 4), "extrapolated": o.extrapolated}
                    for o in advice.options],
        "proposals": proposals,
    }  # fmt: skip


def _print(advice: Advice, current: int, proposals: list[dict[str, Any]]) -> None:
    table = Table(
        "k", "accepted per step", "tokens per step", "acceptance rate", "modelled speedup",
        "measured",
    )  # fmt: skip
    for option in advice.options:
        table.add_row(
            str(option.k),
            f"{option.expected_accepted:.2f}",
            f"{option.tokens_per_step:.2f}",
            f"{option.acceptance_rate:.2f}",
            f"{option.speedup:.2f}x",
            "extrapolated" if option.extrapolated else "yes",
        )
    console = Console()
    console.print(table)
    console.print(advice.summary)
    if note := _trap(advice):
        console.print(note)
    if proposals:
        console.print(f"arms to add (measured at k={current}):")
    for found in proposals:
        console.print(f"- {found['name']}: {found['why']}", soft_wrap=True)
        console.print(f"  {found['flags']}", soft_wrap=True, markup=False)
        if "add_arm" in found:
            console.print(f"  {found['add_arm']}", soft_wrap=True, markup=False)


def _read(source: str) -> str:
    if source.startswith(("http://", "https://")):
        try:
            response = httpx.get(source, timeout=10)
            response.raise_for_status()
        except httpx.HTTPError as exc:
            raise BadRequest(f"cannot read {source}: {exc}") from None
        return response.text
    path = Path(source)
    if not path.is_file():
        raise BadRequest(f"{source} is neither an http(s) URL nor a file")
    return path.read_text()
