"""Speculate below the crossover, against upstreams whose speed depends on their own load.

Two synthetic upstreams on 127.0.0.1 take `--tokens` decode steps per request; each
step's time is set by how many requests that upstream is serving at that moment, as in a
batching engine: the baseline `b(n) = 16 ms x (1 + 0.05 (n - 1))`, the speculative one
`s(n) = 10 ms x (1 + 0.2 (n - 1))`. The speculative one is faster alone and the two are
equal at n = 6; from 7 it is slower. Through the real gateway (`specgate serve`, its own
SQLite store), a closed-loop load of L concurrent clients (L from 1 to 16) measures the
end-to-end latency of three aliases of the same two routes:

- `baseline`: a running shadow rollout that samples nothing (every request: baseline);
- `speculative`: a promoted rollout (every request: the speculative route);
- `by-load`: a promoted rollout with `promotion.route_by_load`, routed by the crossover
  its recorded rehearsal names (`all`: proven to win up to 5 concurrent requests, to
  lose at 7). The rehearsal is the model's own curve written as `specgate rehearse`
  would write it (speedup b(n)/s(n) per level), not a measured sweep.

Each level warms every alias up, then the aliases take turns (`--rounds`) until each ran
`max(120, 12 L)` requests; it prints
p50 and p99 per alias and the by-load mode's ratio to the better of the other two. It
stops by itself: every request and the whole run have deadlines.

    python bench/crossover.py [--tokens 12] [--levels 1,2,...,16] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.gateway import free_port, wait_ready

ALIASES = ("baseline", "speculative", "by-load")
# (base step ms, slope per extra running request) of each upstream.
SHAPES = {"base": (16.0, 0.05), "spec": (10.0, 0.2)}
LEVELS = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16)
RUN_DEADLINE_S = 900.0


def step_s(shape: tuple[float, float], running: int) -> float:
    """Return one decode step's time with `running` requests on the upstream."""
    base_ms, slope = shape
    return base_ms * (1 + slope * (max(1, running) - 1)) / 1000


async def upstream(port: int, shape: tuple[float, float], tokens: int) -> None:
    """Serve OpenAI-style chat completions (JSON), each step timed by the current load."""
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
                try:
                    for _ in range(tokens):
                        await asyncio.sleep(step_s(shape, running))
                finally:
                    running -= 1
                writer.write(reply(tokens))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def reply(tokens: int) -> bytes:
    body = json.dumps(
        {
            "id": "x", "object": "chat.completion", "created": 0, "model": "sim",
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


def seed(url: str, base: int, spec: int) -> None:
    """Routes, the three aliases' rollouts, and the by-load one's rehearsal."""
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
        for name, port, role in (("base", base, RouteRole.BASELINE),
                                 ("spec", spec, RouteRole.CANDIDATE)):  # fmt: skip
            url = f"http://127.0.0.1:{port}/v1"
            route = RouteIn(name=name, base_url=url, model="sim", role=role)
            service.create_route(session, spec=route, actor="bench")
        for alias in ALIASES:
            policy: dict[str, Any] = {"stages": [100]}
            if alias == "by-load":
                policy["promotion"] = {"route_by_load": True, "hysteresis": 1}
            spec_in = RolloutIn(name=alias, alias=alias, baseline_route="base",
                                candidate_route="spec", sample_rate=0.0, policy=policy)  # fmt: skip
            rollout = service.create_rollout(session, spec=spec_in, actor="bench")
            actions = [Action.START] + ([] if alias == "baseline" else [Action.PROMOTE])
            for action in actions:
                service.transition(
                    session, rollout_id=rollout.id, action=action, actor="bench", reason="b"
                )
            if alias == "by-load":
                summary = RehearsalIn.model_validate(rehearsal(list(LEVELS)))
                rehearsals.record(session, rollout_id=rollout.id, rehearsal=summary, actor="bench")


async def sweep_level(gateway: str, alias: str, level: int, count: int) -> list[float]:
    """Run `count` requests at `level` concurrent clients; return their e2e latencies."""
    body = {"model": alias, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 12}
    latencies: list[float] = []
    left = count
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(base_url=gateway, timeout=30.0, limits=limits) as client:

        async def worker() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                started = time.perf_counter()
                answer = await client.post("/v1/chat/completions", json=body)
                answer.raise_for_status()
                latencies.append(time.perf_counter() - started)

        await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(level))), timeout=120)
    return latencies


def share_speculated(gateway: str) -> float:
    """Return the share of the by-load alias's requests sent to the speculative route so
    far (the gateway's counter), and reset the count by remembering it."""
    text = httpx.get(gateway + "/metrics").text
    counts = {"below": 0.0, "other": 0.0}
    for line in text.splitlines():
        if line.startswith("specgate_gateway_routed_by_load_total{"):
            kind = "below" if 'reason="below_crossover"' in line else "other"
            counts[kind] += float(line.rsplit(" ", 1)[1])
    seen = (counts["below"] - _counted["below"], counts["other"] - _counted["other"])
    _counted.update(counts)
    return seen[0] / max(1.0, sum(seen))


_counted = {"below": 0.0, "other": 0.0}


def not_ok(gateway: str) -> dict[str, float]:
    """Return the gateway's route calls that did not end `ok`, by route and status."""
    found: dict[str, float] = {}
    for line in httpx.get(gateway + "/metrics").text.splitlines():
        if line.startswith("specgate_gateway_route_calls_total{") and 'status="ok"' not in line:
            found[line.split("{", 1)[1].split("}")[0]] = float(line.rsplit(" ", 1)[1])
    return found


def stats(values: list[float]) -> dict[str, float]:
    p50, p99 = np.percentile(np.array(values) * 1000, [50, 99])
    return {"p50_ms": round(float(p50), 1), "p99_ms": round(float(p99), 1)}


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| L | baseline p50/p99 ms | speculative p50/p99 ms | by-load p50/p99 ms"
        " | by-load / better p50, p99 |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        cells = [f"{row[a]['p50_ms']:.0f} / {row[a]['p99_ms']:.0f}" for a in ALIASES]
        ratio = f"{row['ratio_p50']:.3f}, {row['ratio_p99']:.3f}"
        lines.append(f"| {row['level']} | {' | '.join(cells)} | {ratio} |")
    return "\n".join(lines)


def measure(gateway: str, levels: list[int], rounds: int) -> list[dict[str, Any]]:
    """Sweep the levels; at each, the aliases take turns for `rounds` rounds, so a drift
    in the shared host's load reaches all three alike."""
    rows = []
    started = time.monotonic()
    for level in levels:
        row: dict[str, Any] = {"level": level}
        seen: dict[str, list[float]] = {alias: [] for alias in ALIASES}
        for alias in ALIASES:
            asyncio.run(sweep_level(gateway, alias, level, level))  # warm-up
        for _ in range(rounds):
            for alias in ALIASES:
                count = max(120, 12 * level) // rounds
                seen[alias] += asyncio.run(sweep_level(gateway, alias, level, count))
        for alias in ALIASES:
            row[alias] = stats(seen[alias])
        row["to_speculative"] = round(share_speculated(gateway), 3)
        for q in ("p50", "p99"):
            better = min(row[a][f"{q}_ms"] for a in ("baseline", "speculative"))
            row[f"ratio_{q}"] = row["by-load"][f"{q}_ms"] / better
        print(json.dumps(row), flush=True)
        rows.append(row)
        if time.monotonic() - started > RUN_DEADLINE_S:
            print("run deadline passed: stopping", flush=True)
            break
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=12)
    parser.add_argument("--levels", default=",".join(map(str, LEVELS)))
    parser.add_argument("--rounds", type=int, default=4, help="turns per level and alias")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--upstream", nargs=2, metavar=("SHAPE", "PORT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.upstream:
        asyncio.run(upstream(int(args.upstream[1]), SHAPES[args.upstream[0]], args.tokens))
        return
    ports = {name: free_port() for name in ("base", "spec", "sink", "gw")}
    me = [sys.executable, __file__, "--tokens", str(args.tokens)]
    procs: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory() as work:
        try:
            for shape in ("base", "spec"):
                procs.append(subprocess.Popen([*me, "--upstream", shape, str(ports[shape])]))
            sink = Path(__file__).with_name("otlp_sink.py")
            procs.append(subprocess.Popen([sys.executable, str(sink), str(ports["sink"])]))
            db = f"sqlite:///{work}/gw.db"
            seed(db, ports["base"], ports["spec"])
            serve = ["serve", "--port", str(ports["gw"]), "--database-url", db,
                     "--otlp-endpoint", f"http://127.0.0.1:{ports['sink']}"]  # fmt: skip
            env = {**os.environ, "SPECGATE_HOME": work, "SPECGATE_CONTROL_RATE": "0"}
            procs.append(subprocess.Popen([sys.executable, "-m", "gate", *serve], env=env))
            gateway = f"http://127.0.0.1:{ports['gw']}"
            wait_ready(gateway + "/healthz")
            rows = measure(gateway, [int(x) for x in args.levels.split(",")], args.rounds)
            print(f"route calls not ok: {not_ok(gateway)}", flush=True)
        finally:
            for proc in reversed(procs):  # the gateway first: its spans still go out
                proc.terminate()
                proc.wait(timeout=10)
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
