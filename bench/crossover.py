"""Speculate below the crossover, against upstreams whose speed depends on their own load.

Two synthetic upstreams on 127.0.0.1 take `--tokens` decode steps per request; each
step's time is set by how many requests that upstream is serving at that moment, as in a
batching engine: the baseline `b(n) = 16 ms x (1 + 0.05 (n - 1))`, the speculative one
`s(n) = 10 ms x (1 + 0.2 (n - 1))`. The speculative one is faster alone and the two are
equal at n = 6; from 7 it is slower. Through the real gateway (`specgate serve`, its own
SQLite store), a closed-loop load of L concurrent clients (L from 1 to 16) measures the
end-to-end latency of four modes, each an alias of the same two routes:

- `baseline`: a running shadow rollout that samples nothing (every request: baseline);
- `speculative`: a promoted rollout (every request: the speculative route);
- `by-load`: a promoted rollout with `promotion.route_by_load`, routed by the crossover
  its recorded rehearsal names (`all`: proven to win up to 5 concurrent requests, to
  lose at 7, so C = 5). The rehearsal is the model's own curve written as `specgate
  rehearse` would write it (speedup b(n)/s(n) per level), not a measured sweep;
- `control`, the A/A line: the model's better mode at L (speculative below 6, else
  baseline) again, under its own alias (`speculative-again`, `baseline-again`).

Each level warms every alias up, then runs `--rounds` rounds; in each, every mode runs
one block of `--requests / --rounds` requests, the order rotated round by round, so a
drift of the shared host reaches every mode alike. Each request is recorded with the
upstream that answered and that upstream's running requests at its arrival (the reply's
id says both). Per level it prints p50 and p99 per mode, the by-load mode's and the
control's ratio to the better of baseline-only and speculative-only with a 95 % interval
from resampling whole rounds (`bench/crossover_stats.py`), whether the by-load ratio is
within 5 % (`yes`: the interval's top is at most 1.05; `no`: its bottom is above;
else `cannot tell`), and the by-load routing (share sent to the speculative upstream,
the most it was running at an arrival, the slowest 1 %'s routes). `--report` pools
runs saved with `--raw` (their rounds all resampled together). It stops by itself:
every request and the whole run have deadlines.

    python bench/crossover.py [--requests 184] [--rounds 8] [--levels 1,2,...,16]
        [--json rows.json] [--raw requests.json.gz]
    python bench/crossover.py --report a.json.gz b.json.gz [--json rows.json]
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.crossover_stats import compare, table
from bench.gateway import free_port, wait_ready

MODES = ("baseline", "speculative", "by-load", "control")
# The control (A/A) is the better mode's configuration again, under its own alias.
ALIASES = ("baseline", "speculative", "by-load", "baseline-again", "speculative-again")
# (base step ms, slope per extra running request) of each upstream.
SHAPES = {"base": (16.0, 0.05), "spec": (10.0, 0.2)}
LEVELS = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16)
RUN_DEADLINE_S = 1200.0


def step_s(shape: tuple[float, float], running: int) -> float:
    """Return one decode step's time with `running` requests on the upstream."""
    base_ms, slope = shape
    return base_ms * (1 + slope * (max(1, running) - 1)) / 1000


async def upstream(port: int, name: str, tokens: int) -> None:
    """Serve OpenAI-style chat completions (JSON), each step timed by the current load;
    the reply's id names this upstream and its running requests at the arrival."""
    shape = SHAPES[name]
    running = 0

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal running
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                length = next(
                    (int(line.split(b":")[1]) for line in head.split(b"\r\n")
                     if line.lower().startswith(b"content-length")), 0,
                )  # fmt: skip
                await reader.readexactly(length)
                if b"/chat/completions" not in head.split(b"\r\n", 1)[0]:
                    # The embedded scraper's GET /metrics: answered at once, never a load.
                    writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                    await writer.drain()
                    continue
                running += 1
                arrived = running
                try:
                    for _ in range(tokens):
                        await asyncio.sleep(step_s(shape, running))
                finally:
                    running -= 1
                writer.write(reply(tokens, f"{name}:{arrived}"))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def reply(tokens: int, tag: str) -> bytes:
    body = json.dumps(
        {
            "id": tag, "object": "chat.completion", "created": 0, "model": "sim",
            "choices": [{"index": 0, "finish_reason": "length",
                         "message": {"role": "assistant", "content": "tok " * tokens}}],
            "usage": {"prompt_tokens": 8, "completion_tokens": tokens, "total_tokens": 8 + tokens},
        }
    ).encode()  # fmt: skip
    head = f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body


def rehearsal(levels: list[int]) -> dict[str, Any]:
    """The model's curve as a `specgate rehearse` summary: wins up to 5, loses from 7."""

    def cell(n: int) -> dict[str, Any]:
        gain = step_s(SHAPES["base"], n) / step_s(SHAPES["spec"], n)
        call = "wins" if gain > 1.02 else "loses" if gain < 0.98 else "unclear"
        return {"speedup": gain, "interval": [gain * 0.98, gain * 1.02], "call": call}

    return {
        "run_at": datetime.now(UTC).isoformat(),
        "routes": {"baseline": "model b(n)", "candidate": "model s(n)"},
        "workload": {"source": "bench/crossover.py model", "requests": 0},
        "levels": [{"concurrency": n, "segments": {"all": cell(n)}} for n in levels],
        "crossover": {"all": {"low": 5, "high": 7, "text": "between 5 and 7"}},
    }


def seed(
    url: str,
    base: int,
    spec: int,
    models: tuple[str, str] = ("sim", "sim"),
    recorded: dict[str, Any] | None = None,
) -> int:
    """Routes, the aliases' rollouts, and the by-load one's rehearsal (`recorded`, else
    the model's curve; none when `recorded` is empty). Return the by-load rollout's id."""
    from gate.db import migrate
    from gate.db.engine import make_engine, session_factory
    from gate.db.enums import RouteRole
    from gate.rehearse import service as rehearsals
    from gate.rehearse.schemas import RehearsalIn
    from gate.rollouts import service
    from gate.rollouts.schemas import RolloutIn, RouteIn
    from gate.rollouts.states import Action

    migrate.upgrade(url)
    with session_factory(make_engine(url))() as session, session.begin():
        routes = (("base", base, RouteRole.BASELINE, models[0]),
                  ("spec", spec, RouteRole.CANDIDATE, models[1]))  # fmt: skip
        for name, port, role, model in routes:
            url = f"http://127.0.0.1:{port}/v1"
            route = RouteIn(name=name, base_url=url, model=model, role=role)
            service.create_route(session, spec=route, actor="bench")
        for alias in ALIASES:
            policy: dict[str, Any] = {"stages": [100]}
            if alias == "by-load":
                policy["promotion"] = {"route_by_load": True, "hysteresis": 1}
            spec_in = RolloutIn(name=alias, alias=alias, baseline_route="base",
                                candidate_route="spec", sample_rate=0.0, policy=policy)  # fmt: skip
            rollout = service.create_rollout(session, spec=spec_in, actor="bench")
            actions = [Action.START] + ([] if alias.startswith("baseline") else [Action.PROMOTE])
            for action in actions:
                service.transition(
                    session, rollout_id=rollout.id, action=action, actor="bench", reason="b"
                )
            if alias != "by-load":
                continue
            by_load = rollout.id
            document = rehearsal(list(LEVELS)) if recorded is None else recorded
            if document:
                summary = RehearsalIn.model_validate(document)
                rehearsals.record(session, rollout_id=rollout.id, rehearsal=summary, actor="bench")
    return by_load


@dataclass(frozen=True)
class Sweep:
    """What a sweep sends and how it reads the replies."""

    bodies: tuple[dict[str, Any], ...]  # request bodies, cycled; the alias is the model
    tag: Callable[[dict[str, Any]], tuple[str, int | None]]  # reply: upstream, running
    control: Callable[[int], str]  # the A/A control's alias at a level
    better: Callable[[int], str]  # the mode expected to be better at a level
    timeout_s: float = 120.0  # one block's deadline
    deadline_s: float = RUN_DEADLINE_S  # no level starts after this long


def model_tag(reply: dict[str, Any]) -> tuple[str, int | None]:
    """Return the model upstream's name and its running requests at the arrival."""
    route, running = reply["id"].split(":")
    return route, int(running)


async def block(
    client: httpx.AsyncClient, sweep: Sweep, alias: str, level: int, count: int
) -> list[list[Any]]:
    """Run `count` requests at `level` concurrent clients; return, per request, its start
    (s), e2e latency (ms), the upstream that answered and that upstream's running
    requests when it arrived (its own count from its reply, else this block's requests
    to it that were in flight at the arrival, the arrival included)."""
    done: list[list[Any]] = []
    spans: list[tuple[float, float]] = []  # each request's start and end, unrounded
    left = count

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            body = {**sweep.bodies[left % len(sweep.bodies)], "model": alias}
            started = time.perf_counter()
            answer = await client.post("/v1/chat/completions", json=body)
            answer.raise_for_status()
            ended = time.perf_counter()
            route, running = sweep.tag(answer.json())
            done.append([round(started, 4), round((ended - started) * 1000, 2), route, running])
            spans.append((started, ended))

    workers = asyncio.gather(*(worker() for _ in range(level)))
    await asyncio.wait_for(workers, timeout=sweep.timeout_s)
    for request, (start, _) in zip(done, spans, strict=True):
        if request[3] is None:
            request[3] = sum(
                1
                for other, (began, ended) in zip(done, spans, strict=True)
                if other[2] == request[2] and began <= start < ended
            )
    return done


def control_of(level: int) -> str:
    """Return the A/A control's alias: the model's better mode at `level`, again."""
    faster = step_s(SHAPES["spec"], level) < step_s(SHAPES["base"], level)
    return "speculative-again" if faster else "baseline-again"


MODEL = Sweep(
    bodies=({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 12},),
    tag=model_tag,
    control=control_of,
    better=lambda level: control_of(level).removesuffix("-again"),
)


async def measure_level(
    client: httpx.AsyncClient, sweep: Sweep, level: int, count: int, rounds: int
) -> dict[str, Any]:
    """Measure one level: a warm-up, then `rounds` rounds in which each mode runs one
    block, the order rotated every round so that neither drift nor position in the
    round favours a mode. Return the raw requests, each tagged with its round."""
    aliases = {mode: mode for mode in MODES} | {"control": sweep.control(level)}
    for alias in aliases.values():
        await block(client, sweep, alias, level, 2 * level)
    found: dict[str, list[list[Any]]] = {mode: [] for mode in MODES}
    for r in range(rounds):
        for mode in MODES[r % len(MODES) :] + MODES[: r % len(MODES)]:
            done = await block(client, sweep, aliases[mode], level, -(-count // rounds))
            found[mode] += [[0, r, *request] for request in done]
    return {"level": level, "control": aliases["control"], "requests": found}


def routing(requests: list[list[Any]]) -> dict[str, Any]:
    """Return how the requests were routed: the share sent to the speculative upstream,
    the most requests it was running when one arrived (the crossover C = 5 caps it at 5
    in the by-load mode), and the slowest 1 %'s routes with that count at their arrival."""
    routes = [r[4] for r in requests]
    cut = np.percentile([r[3] for r in requests], 99)
    tail = sorted((r for r in requests if r[3] >= cut), key=lambda r: -r[3])
    return {
        "to_speculative": round(routes.count("spec") / len(routes), 3),
        "spec_max_running": max((r[5] for r in requests if r[4] == "spec"), default=0),
        "tail": [f"{r[3]:.0f}ms {r[4]}@{r[5]}" for r in tail],
    }


def summarize(raw: list[dict[str, Any]], sweep: Sweep = MODEL) -> list[dict[str, Any]]:
    """Pool raw runs level by level: quantiles, ratios with intervals, routing."""
    rows = []
    for level in sorted({r["level"] for r in raw}):
        found = [r for r in raw if r["level"] == level]
        blocks: dict[str, np.ndarray] = {}
        for mode in MODES:
            by_round: dict[tuple[int, int], list[float]] = {}
            for q in (q for r in found for q in r["requests"][mode]):
                by_round.setdefault((q[0], q[1]), []).append(q[3])
            if len({len(v) for v in by_round.values()}) > 1:
                raise SystemExit("--report pools runs made with one --requests and --rounds")
            blocks[mode] = np.array([by_round[k] for k in sorted(by_round)])
        by_load = [q for r in found for q in r["requests"]["by-load"]]
        better = sweep.better(level)
        row = {"level": level, "n": len(by_load), **compare(blocks, seed=level)}
        route = routing(by_load)
        row["to_speculative"] = route["to_speculative"]
        row["by-load_routing"] = route
        row[f"{better}_tail"] = routing([q for r in found for q in r["requests"][better]])["tail"]
        rows.append(row)
    return rows


async def measure(
    gateway: str, sweep: Sweep, levels: list[int], count: int, rounds: int
) -> list[dict[str, Any]]:
    """Sweep the levels with one client (its connections kept); stop at the deadline."""
    raw = []
    started = time.monotonic()
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    timeout = sweep.timeout_s
    async with httpx.AsyncClient(base_url=gateway, timeout=timeout, limits=limits) as client:
        for level in levels:
            found = await measure_level(client, sweep, level, count, rounds)
            raw.append(found)
            row = summarize([found], sweep)[0]
            print(json.dumps({k: row[k] for k in ("level", "by-load_p99", "control_p99")}
                             | {"routing": row["by-load_routing"]}), flush=True)  # fmt: skip
            if time.monotonic() - started > sweep.deadline_s:
                print("run deadline passed: stopping", flush=True)
                break
    return raw


def not_ok(gateway: str) -> dict[str, float]:
    """Return the gateway's route calls that did not end `ok`, by route and status."""
    found: dict[str, float] = {}
    for line in httpx.get(gateway + "/metrics").text.splitlines():
        if line.startswith("specgate_gateway_route_calls_total{") and 'status="ok"' not in line:
            found[line.split("{", 1)[1].split("}")[0]] = float(line.rsplit(" ", 1)[1])
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=12, help="decode steps per request (12)")
    parser.add_argument(
        "--levels",
        default=",".join(map(str, LEVELS)),
        help="concurrencies, comma-separated (1..8,10,..,16)",
    )
    parser.add_argument(
        "--requests", type=int, default=184, help="requests per mode and level (184)"
    )
    parser.add_argument(
        "--rounds", type=int, default=8, help="rounds per level; a mode runs one block a round (8)"
    )
    parser.add_argument("--json", type=Path, help="write the per-level rows here")
    parser.add_argument("--raw", type=Path, help="write every request here (gzip JSON)")
    parser.add_argument(
        "--report",
        type=Path,
        nargs="+",
        metavar="RAW",
        help="measure nothing: pool these --raw files, print the table",
    )
    parser.add_argument("--upstream", nargs=2, metavar=("SHAPE", "PORT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.upstream:
        asyncio.run(upstream(int(args.upstream[1]), args.upstream[0], args.tokens))
        return
    if args.report:
        raw = [level for i, path in enumerate(args.report) for level in load_raw(path, run=i)]
    else:
        raw = run_sweep(args, modelled_upstreams(args.tokens), modelled_rollouts)
    rows = summarize(raw)
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


def modelled_upstreams(tokens: int) -> Callable[[dict[str, int]], list[subprocess.Popen[bytes]]]:
    """Return a starter of the two modelled upstreams, each `tokens` decode steps."""

    def starts(ports: dict[str, int]) -> list[subprocess.Popen[bytes]]:
        me = [sys.executable, __file__, "--tokens", str(tokens)]
        return [subprocess.Popen([*me, "--upstream", shape, str(ports[shape])])
                for shape in ("base", "spec")]  # fmt: skip

    return starts


def modelled_rollouts(db: str, ports: dict[str, int]) -> Sweep:
    """Seed the rollouts with the model's curve as the rehearsal; return the model's sweep."""
    seed(db, ports["base"], ports["spec"])
    return MODEL


def run_sweep(
    args: argparse.Namespace,
    upstreams: Callable[[dict[str, int]], list[subprocess.Popen[bytes]]],
    prepare: Callable[[str, dict[str, int]], Sweep],
) -> list[dict[str, Any]]:
    """Start the upstreams, the OTLP sink and the gateway; sweep; return the raw levels.

    `upstreams` starts the two upstreams and sets `ports["base"]` and `ports["spec"]` to
    theirs when it picks them; `prepare` fills the gateway's database and returns the
    sweep to run.
    """
    ports = {name: free_port() for name in ("base", "spec", "sink", "gw")}
    procs: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory() as work:
        try:
            procs += upstreams(ports)
            sink = Path(__file__).with_name("otlp_sink.py")
            procs.append(subprocess.Popen([sys.executable, str(sink), str(ports["sink"])]))
            db = f"sqlite:///{work}/gw.db"
            sweep = prepare(db, ports)
            serve = ["serve", "--port", str(ports["gw"]), "--database-url", db,
                     "--otlp-endpoint", f"http://127.0.0.1:{ports['sink']}"]  # fmt: skip
            env = {**os.environ, "SPECGATE_HOME": work, "SPECGATE_CONTROL_RATE": "0"}
            procs.append(subprocess.Popen([sys.executable, "-m", "gate", *serve], env=env))
            gateway = f"http://127.0.0.1:{ports['gw']}"
            wait_ready(gateway + "/healthz")
            levels = [int(x) for x in args.levels.split(",")]
            raw = asyncio.run(measure(gateway, sweep, levels, args.requests, args.rounds))
            print(f"route calls not ok: {not_ok(gateway)}", flush=True)
        finally:
            for proc in reversed(procs):  # the gateway first: its spans still go out
                proc.terminate()
                proc.wait(timeout=10)
    if args.raw:
        args.raw.write_bytes(gzip.compress(json.dumps(raw).encode()))
    return raw


def load_raw(path: Path, run: int) -> list[dict[str, Any]]:
    """Read a --raw file, tagging its requests as run `run` (their blocks stay apart)."""
    raw: list[dict[str, Any]] = json.loads(gzip.decompress(path.read_bytes()))
    for level in raw:
        for requests in level["requests"].values():
            for request in requests:
                request[0] = run
    return raw


if __name__ == "__main__":
    main()
