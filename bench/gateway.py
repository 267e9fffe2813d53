"""Gateway overhead benchmark: TTFT and e2e direct vs through specgate vs through LiteLLM.

Topology (2 cores): the proxy under test is pinned to core 0; the upstream, the OTLP sink
and this load generator to core 1. Every repeat runs each target once, interleaved, at
each concurrency, so drifts of the shared machine hit all targets alike.

    python bench/gateway.py --streams 1,16,64,256 --repeats 3 \
        --litellm /tmp/litellm/venv/bin/litellm --out bench/results/gateway.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loadgen import build_request, run

from gate.db import migrate
from gate.db.engine import make_engine, session_factory
from gate.db.enums import RouteRole
from gate.rollouts import service
from gate.rollouts.schemas import RolloutIn, RouteIn
from gate.rollouts.states import Action

BODY = json.dumps(
    {
        "model": "{model}",
        "stream": True,
        "messages": [{"role": "user", "content": "Proofread: teh cat sat."}],
    }
)
PROXY_CORE, LOAD_CORE = "0", "1"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(
    cmd: list[str], core: str, env: dict[str, str] | None = None, cwd: str | None = None
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["taskset", "-c", core, *cmd],
        env={**os.environ, **(env or {})},
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def cpu_seconds(proc: subprocess.Popen[bytes]) -> float:
    """CPU time (user + system, all threads and children) of a process started by `start`."""
    total = 0.0
    pids = [proc.pid]
    while pids:
        pid = pids.pop()
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except FileNotFoundError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        pids.extend(int(child) for child in children)
    return total


def wait_ready(url: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1).status_code < 500:
                return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not come up")


def engine(port: int, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "gate",
        "engine",
        "--model",
        "sim",
        "--port",
        str(port),
        "--ttft-ms",
        "20",
        "--tokens",
        "32",
        *extra,
    ]


def seed_store(url: str, upstream: int, candidate: int, hanging: int) -> None:
    """Three aliases: pure proxy (no sample), shadow at 10 %, shadow to a hanging route."""
    migrate.upgrade(url)
    factory = session_factory(make_engine(url))
    with factory() as session, session.begin():
        for name, port, role in (
            ("base", upstream, RouteRole.BASELINE),
            ("spec", candidate, RouteRole.CANDIDATE),
            ("hang", hanging, RouteRole.CANDIDATE),
        ):
            service.create_route(
                session,
                spec=RouteIn(
                    name=name, base_url=f"http://127.0.0.1:{port}/v1", model="sim", role=role
                ),
                actor="bench",
            )
        for alias, cand, rate in (
            ("plain", "spec", 0.0),
            ("shadow", "spec", 0.1),
            ("hanging", "hang", 0.1),
        ):
            rollout = service.create_rollout(
                session,
                spec=RolloutIn(
                    name=alias,
                    alias=alias,
                    baseline_route="base",
                    candidate_route=cand,
                    sample_rate=rate,
                    policy={"stages": [100]},
                ),
                actor="bench",
            )
            service.transition(
                session, rollout_id=rollout.id, action=Action.START, actor="bench", reason="bench"
            )


def litellm_config(path: Path, upstream: int) -> None:
    path.write_text(
        "model_list:\n  - model_name: plain\n    litellm_params:\n"
        f"      model: openai/sim\n      api_base: http://127.0.0.1:{upstream}/v1\n"
        "      api_key: unused\n"
        "litellm_settings:\n  drop_params: true\n  telemetry: false\n"
    )


def summarise(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)

    def q(p: float) -> float:
        return ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1000

    return {"p50_ms": q(0.50), "p99_ms": q(0.99), "n": len(ordered)}


LITELLM_KEY = "sk-specgate-bench-0123456789abcdef"


async def measure(
    port: int, model: str, streams: int, per_stream: int, headers: dict[str, str] | None = None
) -> dict[str, Any]:
    body = BODY.replace("{model}", model).encode()
    request = build_request("127.0.0.1", port, "/v1/chat/completions", body, headers or {})
    result = await run("127.0.0.1", port, request, streams=streams, per_stream=per_stream)
    ok = result.ok
    return {
        "ttft": summarise([s.ttft_s for s in ok]),
        "e2e": summarise([s.e2e_s for s in ok]),
        "errors": len(result.samples) - len(ok),
        "rps": len(ok) / result.wall_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", default="1,16,64,256")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--requests", type=int, default=512, help="requests per run (at least 1 per stream)"
    )
    parser.add_argument(
        "--litellm", default=None, help="path to a litellm executable (separate venv)"
    )
    parser.add_argument("--litellm-requests", type=int, default=128)
    parser.add_argument(
        "--upstream",
        choices=["lean", "sim"],
        default="lean",
        help="primary upstream: bench/sse_upstream.py, or `specgate engine --model sim`",
    )
    parser.add_argument(
        "--before",
        default=None,
        help="another specgate checkout (e.g. a `git worktree` of an earlier commit): its "
        "gateway runs as the target `specgate_before`, in the same run",
    )
    parser.add_argument("--out", default="bench/results/gateway.json")
    args = parser.parse_args()
    os.sched_setaffinity(0, {int(LOAD_CORE)})
    work = Path(tempfile.mkdtemp(prefix="specgate-bench-"))
    names = ("up", "cand", "hang", "sink", "gw", "before", "litellm")
    ports = {name: free_port() for name in names}
    lean = [sys.executable, str(Path(__file__).with_name("sse_upstream.py")), str(ports["up"])]
    procs = [
        start(lean if args.upstream == "lean" else engine(ports["up"]), LOAD_CORE),
        start(engine(ports["cand"]), LOAD_CORE),
        start(engine(ports["hang"], "--failure", "hang"), LOAD_CORE),
        start(
            [sys.executable, str(Path(__file__).with_name("otlp_sink.py")), str(ports["sink"])],
            LOAD_CORE,
        ),
    ]
    try:
        for name in ("up", "cand", "hang"):
            wait_ready(f"http://127.0.0.1:{ports[name]}/v1/models")
        db = f"sqlite:///{work}/gw.db"
        seed_store(db, ports["up"], ports["cand"], ports["hang"])

        def gateway_cmd(port: int, store: str = db) -> list[str]:
            sink = f"http://127.0.0.1:{ports['sink']}"
            serve = ["serve", "--port", str(port), "--otlp-endpoint", sink, "--database-url", store]
            return [sys.executable, "-m", "gate", *serve]

        env = {"SPECGATE_HOME": str(work), "SPECGATE_CONTROL_RATE": "0"}
        procs.append(start(gateway_cmd(ports["gw"]), PROXY_CORE, env))
        wait_ready(f"http://127.0.0.1:{ports['gw']}/healthz")
        gateway = procs[-1]
        proxies = {
            "specgate": gateway,
            "specgate_shadow10": gateway,
            "specgate_hanging_candidate": gateway,
        }
        targets = {
            "direct": (ports["up"], "sim"),
            "specgate": (ports["gw"], "plain"),
            "specgate_shadow10": (ports["gw"], "shadow"),
            "specgate_hanging_candidate": (ports["gw"], "hanging"),
        }
        if args.before:
            checkout = str(Path(args.before).resolve())
            before_env = {**env, "PYTHONPATH": checkout}
            # Its own store, migrated and seeded by its own code: its schema may be older.
            before_db = f"sqlite:///{work}/gw-before.db"
            seed = (
                f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
                f"import gateway; gateway.seed_store({before_db!r}, "
                f"{ports['up']}, {ports['cand']}, {ports['hang']})"
            )
            subprocess.run([sys.executable, "-c", seed], env=before_env, cwd=checkout, check=True)
            procs.append(
                start(gateway_cmd(ports["before"], before_db), PROXY_CORE, before_env, cwd=checkout)
            )
            wait_ready(f"http://127.0.0.1:{ports['before']}/healthz")
            proxies["specgate_before"] = procs[-1]
            targets["specgate_before"] = (ports["before"], "plain")
        if args.litellm:
            cfg = work / "litellm.yaml"
            litellm_config(cfg, ports["up"])
            procs.append(
                start(
                    [
                        args.litellm,
                        "--config",
                        str(cfg),
                        "--port",
                        str(ports["litellm"]),
                        "--num_workers",
                        "1",
                    ],
                    PROXY_CORE,
                    {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_MASTER_KEY": LITELLM_KEY},
                )
            )
            wait_ready(f"http://127.0.0.1:{ports['litellm']}/health/liveliness", timeout=300)
            targets["litellm"] = (ports["litellm"], "plain")
            proxies["litellm"] = procs[-1]
        results: list[dict[str, Any]] = []
        for repeat in range(args.repeats):
            for streams in [int(s) for s in args.streams.split(",")]:
                for name, (port, model) in targets.items():
                    total = args.litellm_requests if name == "litellm" else args.requests
                    per_stream = max(1, total // streams)
                    auth = {"Authorization": f"Bearer {LITELLM_KEY}"} if name == "litellm" else None
                    proxy = proxies.get(name)
                    cpu = cpu_seconds(proxy) if proxy else 0.0
                    row = asyncio.run(measure(port, model, streams, per_stream, auth))
                    row.update(target=name, streams=streams, repeat=repeat)
                    if proxy:
                        served = row["ttft"]["n"]
                        row["cpu_us_per_request"] = (cpu_seconds(proxy) - cpu) / served * 1e6
                    results.append(row)
                    print(json.dumps(row), flush=True)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=1))
        print(report(results))
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)


HEADER = (
    "| streams | target | TTFT p50 ms | TTFT p99 ms | e2e p50 ms | e2e p99 ms "
    "| added TTFT p50 ms | added TTFT p99 ms | req/s | proxy CPU µs/req |\n" + "|---" * 10 + "|"
)


def added(rows: list[dict[str, Any]], direct: dict[int, dict[str, Any]], field: str) -> str:
    """Median (min..max) over repeats of TTFT minus the same repeat's direct TTFT."""
    deltas = [r["ttft"][field] - direct[r["repeat"]]["ttft"][field] for r in rows]
    return f"{statistics.median(deltas):.2f} ({min(deltas):.2f}..{max(deltas):.2f})"


def report(results: list[dict[str, Any]]) -> str:
    """Median over repeats; added latency is per repeat against that repeat's direct run."""
    groups: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for row in results:
        groups.setdefault((row["streams"], row["target"]), []).append(row)
    lines = [HEADER]
    for (streams, target), rows in sorted(groups.items()):
        direct = {r["repeat"]: r for r in groups[(streams, "direct")]}
        med = {
            f"{k}_{f}": statistics.median(r[k][f] for r in rows)
            for k in ("ttft", "e2e")
            for f in ("p50_ms", "p99_ms")
        }
        rps = statistics.median(r["rps"] for r in rows)
        cpu = [r["cpu_us_per_request"] for r in rows if "cpu_us_per_request" in r]
        cpu_text = f"{statistics.median(cpu):.0f}" if cpu else "-"
        lines.append(
            f"| {streams} | {target} | {med['ttft_p50_ms']:.2f} | {med['ttft_p99_ms']:.2f} "
            f"| {med['e2e_p50_ms']:.2f} | {med['e2e_p99_ms']:.2f} "
            f"| {added(rows, direct, 'p50_ms')} | {added(rows, direct, 'p99_ms')} | {rps:.0f} "
            f"| {cpu_text} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
