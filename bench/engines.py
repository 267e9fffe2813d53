"""Local engines alone on one core: plain vs n-gram speculative, per prompt class.

It starts a plain and a speculative `specgate engine` pinned to the same CPU (`taskset -c`,
one thread each), replays the built-in workload one request at a time over streaming chat,
alternating engines, and reports per prompt class: decode tok/s and TPOT ((e2e - TTFT) /
(tokens - 1), from the engine's per-request `metrics`: held-back tool calls reach a client
only at the end), TTFT, the draft acceptance rate and mean acceptance length (from
`metrics.speculative_decoding`), and greedy parity against the plain run.

    .venv/bin/python bench/engines.py --backend llamacpp --per-class 6
    .venv/bin/python bench/engines.py --backend transformers --per-class 3 --max-tokens 64
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from gate.engines.workload import WorkloadItem, load_workload


@dataclass
class Call:
    """One streamed request as the client saw it."""

    segment: str
    ttft_s: float
    e2e_s: float
    tokens: int
    text: str
    greedy: bool
    drafted: int = 0
    accepted: int = 0
    steps: int = 0

    @property
    def tpot_s(self) -> float:
        """Return (e2e - TTFT) / (tokens - 1)."""
        return max(0.0, self.e2e_s - self.ttft_s) / max(1, self.tokens - 1)


@dataclass
class Row:
    """One prompt class in one mode."""

    segment: str
    mode: str
    requests: int
    tokens: int
    tok_s: float
    tpot_ms: float
    ttft_ms: float
    acceptance: float | None = None
    mean_acceptance_length: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(
    backend: str, speculative: bool, cpu: str, spec_args: str = "", engine_args: str = ""
) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    engine = [sys.executable, "-m", "gate", "engine", "--backend", backend, "--threads", "1"]
    command = ["taskset", "-c", cpu, *engine, "--port", str(port), *engine_args.split()]
    if speculative:
        command += ["--speculative", "ngram", *spec_args.split()]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return process, url
        except httpx.HTTPError:
            time.sleep(0.2)
    process.kill()
    raise SystemExit(f"engine {command} did not start")


def call(url: str, item: WorkloadItem, max_tokens: int | None) -> Call:
    body = {**item.engine_body, "stream": True, "stream_options": {"include_usage": True}}
    if max_tokens:
        body["max_tokens"] = min(int(body.get("max_tokens", max_tokens)), max_tokens)
    started = time.perf_counter()
    first: float | None = None
    text: list[str] = []
    final: dict[str, Any] = {}
    with httpx.stream("POST", url + item.path, json=body, timeout=600) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            for choice in chunk.get("choices") or ():
                delta = choice.get("delta") or {}
                piece = delta.get("content") or (delta.get("tool_calls") and "<tool>")
                if piece:
                    first = first or time.perf_counter()
                    text.append(str(piece))
            if chunk.get("usage"):
                final = chunk
    ended = time.perf_counter()
    metrics = final.get("metrics") or {}
    spec = metrics.get("speculative_decoding") or {}
    # The engine's own clock: a held-back tool call reaches the client only at the end.
    ttft_ms, total_ms = metrics.get("time_to_first_token_ms"), metrics.get("generation_time_ms")
    return Call(
        segment=item.segment,
        ttft_s=ttft_ms / 1000 if ttft_ms is not None else (first or ended) - started,
        e2e_s=total_ms / 1000 if total_ms is not None else ended - started,
        tokens=int(final.get("usage", {}).get("completion_tokens", 0)),
        text="".join(text),
        greedy=float(body.get("temperature", 1.0)) == 0.0,
        drafted=int(spec.get("num_draft_tokens", 0)),
        accepted=int(spec.get("num_accepted_draft_tokens", 0)),
        steps=int(spec.get("num_spec_steps", 0)),
    )


def run_pair(args: argparse.Namespace, items: list[WorkloadItem]) -> tuple[list[Call], list[Call]]:
    """Replay the items on both engines in turn, keeping each request's best of `repeats`.

    Both engines are pinned to the same CPU and only one works at a time, so each runs
    alone; alternating per request exposes both to the same background load, and the
    best of several repeats discards requests that another process disturbed.
    """
    plain_engine, plain_url = start(args.backend, False, args.cpu, engine_args=args.engine_args)
    try:
        spec_engine, spec_url = start(
            args.backend, True, args.cpu, args.spec_args, engine_args=args.engine_args
        )
    except BaseException:
        plain_engine.kill()
        raise
    best: dict[str, list[Call | None]] = {"plain": [None] * len(items), "spec": [None] * len(items)}
    try:
        for url in (plain_url, spec_url):
            call(url, items[0], 8)  # warm-up, not counted
        for repeat in range(args.repeats):
            order = [("plain", plain_url), ("spec", spec_url)]
            for n, item in enumerate(items):
                for mode, url in order if (n + repeat) % 2 == 0 else order[::-1]:
                    got = call(url, item, args.max_tokens)
                    kept = best[mode][n]
                    if kept is None or got.tpot_s < kept.tpot_s:
                        best[mode][n] = got
                print(f"  repeat {repeat + 1} {n + 1}/{len(items)} {item.id}", file=sys.stderr)
    finally:
        for process in (plain_engine, spec_engine):
            process.terminate()
            process.wait(timeout=30)
    return [c for c in best["plain"] if c], [c for c in best["spec"] if c]


def summarise(calls: list[Call], mode: str) -> list[Row]:
    groups: dict[str, list[Call]] = defaultdict(list)
    for c in calls:
        groups[c.segment].append(c)
        groups["all"].append(c)
    rows = []
    for segment, group in groups.items():
        decode_s = sum(max(0.0, c.e2e_s - c.ttft_s) for c in group)
        decoded = sum(max(0, c.tokens - 1) for c in group)
        drafted = sum(c.drafted for c in group)
        steps = sum(c.steps for c in group)
        accepted = sum(c.accepted for c in group)
        rows.append(
            Row(
                segment=segment,
                mode=mode,
                requests=len(group),
                tokens=sum(c.tokens for c in group),
                tok_s=decoded / decode_s if decode_s else 0.0,
                tpot_ms=1000 * decode_s / decoded if decoded else 0.0,
                ttft_ms=1000 * statistics.median(c.ttft_s for c in group),
                acceptance=accepted / drafted if drafted else None,
                mean_acceptance_length=1 + accepted / steps if steps else None,
            )
        )
    return rows


def parity(plain: list[Call], spec: list[Call]) -> dict[str, tuple[int, int]]:
    """Return per class (greedy pairs with identical text, greedy pairs)."""
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for a, b in zip(plain, spec, strict=True):
        if a.greedy:
            for key in (a.segment, "all"):
                out[key][0] += a.text == b.text
                out[key][1] += 1
    return {key: (same, total) for key, (same, total) in out.items()}


def paired(plain: list[Call], spec: list[Call]) -> dict[str, float]:
    """Return per class the median of per-request TPOT ratios (plain / spec)."""
    ratios: dict[str, list[float]] = defaultdict(list)
    for a, b in zip(plain, spec, strict=True):
        if a.tokens > 1 and b.tokens > 1 and b.tpot_s > 0:
            for key in (a.segment, "all"):
                ratios[key].append(a.tpot_s / b.tpot_s)
    return {key: statistics.median(values) for key, values in ratios.items()}


def table(plain: list[Call], spec: list[Call]) -> str:
    rows_plain, rows_spec = summarise(plain, "plain"), summarise(spec, "spec")
    same, ratio = parity(plain, spec), paired(plain, spec)
    lines = [
        "| class | n | plain tok/s | spec tok/s | TPOT plain → spec (ms) | speedup (TPOT) "
        "| paired p50 | acceptance | mean acc. length | TTFT p50 plain / spec (ms) "
        "| greedy exact |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    by_segment = {r.segment: r for r in rows_spec}
    for p in sorted(rows_plain, key=lambda r: (r.segment == "all", r.segment)):
        s = by_segment[p.segment]
        speedup = p.tpot_ms / s.tpot_ms if s.tpot_ms else 0.0
        acc = f"{100 * s.acceptance:.0f}%" if s.acceptance is not None else "-"
        mal = f"{s.mean_acceptance_length:.2f}" if s.mean_acceptance_length else "-"
        hits, total = same.get(p.segment, (0, 0))
        exact = f"{hits}/{total}" if total else "-"
        lines.append(
            f"| {p.segment} | {p.requests} | {p.tok_s:.1f} | {s.tok_s:.1f} | "
            f"{p.tpot_ms:.1f} → {s.tpot_ms:.1f} | {speedup:.2f}x | "
            f"{ratio.get(p.segment, 0.0):.2f}x | {acc} | {mal} | "
            f"{p.ttft_ms:.0f} / {s.ttft_ms:.0f} | {exact} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default="llamacpp", choices=["llamacpp", "transformers"])
    parser.add_argument("--per-class", type=int, default=6, help="requests per prompt class")
    parser.add_argument("--max-tokens", type=int, default=0, help="cap each request's max_tokens")
    parser.add_argument("--cpu", default="1", help="the one CPU both engines are pinned to")
    parser.add_argument("--repeats", type=int, default=2, help="keep each request's best of N")
    parser.add_argument("--segments", default="", help="comma-separated classes (default all)")
    parser.add_argument("--spec-args", default="", help="extra engine flags for the spec run")
    parser.add_argument(
        "--engine-args", default="", help="extra flags for both engines, e.g. '--gguf PATH'"
    )
    parser.add_argument("--json", default="", help="write the raw calls and rows here")
    args = parser.parse_args()
    items = load_workload(segments=[s for s in args.segments.split(",") if s])
    counts: dict[str, int] = defaultdict(int)
    chosen = []
    for item in items:
        if counts[item.segment] < args.per_class:
            counts[item.segment] += 1
            chosen.append(item)
    load = os.getloadavg()[0]
    plain, spec = run_pair(args, chosen)
    weights = f"{args.engine_args} " if args.engine_args else ""
    print(
        f"backend {args.backend} {weights}(spec: ngram {args.spec_args or 'defaults'}), "
        f"CPU {args.cpu}, 1 thread, best of {args.repeats}; "
        f"load average {load:.2f} at start, {os.getloadavg()[0]:.2f} at end"
    )
    print(table(plain, spec))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(
                {
                    "rows": [
                        asdict(r) for r in summarise(plain, "plain") + summarise(spec, "spec")
                    ],
                    "plain": [asdict(c) for c in plain],
                    "spec": [asdict(c) for c in spec],
                },
                out,
                indent=1,
            )


if __name__ == "__main__":
    main()
