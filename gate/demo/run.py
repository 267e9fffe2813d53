"""Run the demo: engines, gateway, replay, then the summary and the verdict."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx
import orjson
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from gate.db import migrate
from gate.db.engine import engine_from_settings, session_factory, transaction
from gate.db.enums import PairState, RolloutMode, RolloutState, RouteRole
from gate.db.models import Evaluation, Pair, Verdict
from gate.demo.processes import EngineProcess, ServerThread, cpu_cores
from gate.demo.summary import SegmentRow, summarise
from gate.engines.weights import default_encoding, weights_path
from gate.engines.workload import WorkloadItem, load_workload
from gate.gateway.app import ProxyDispatch
from gate.gateway.factory import build_gateway_app
from gate.reports import glance
from gate.reports.glance import Glance
from gate.rollouts import service
from gate.rollouts.schemas import RolloutIn, RouteIn
from gate.rollouts.states import Action
from gate.routing import service as routing
from gate.routing.deployment import publisher
from gate.routing.pubsub import Publisher
from gate.settings import Settings
from gate.verdicts.service import run_gate

ACTOR = "demo"


@dataclass(frozen=True)
class DemoOptions:
    requests: int = 80
    backend: str = "llamacpp"
    num_speculative_tokens: int = 8
    parallel: int = 1  # llama.cpp slots per engine: requests each decodes at once
    weights: str | None = None  # None: the backend's default encoding
    engine_timeout_s: float = 180.0
    settle_timeout_s: float = 180.0


@dataclass(frozen=True)
class DemoResult:
    rollout_id: int
    rows: list[SegmentRow]
    verdict: Verdict
    report_dir: Path | None
    # The answer at a glance of the verdict: what the demo ends with.
    glance: Glance | None = None


def demo_policy(segments: list[str]) -> dict[str, object]:
    """A policy sized for a laptop run: the default guardrails, a short warm-up."""
    return {
        "segments": segments,
        "stages": [100],
        "warmup_pairs": 10,
        "min_pairs": 40,
        "min_duration_s": 0,
    }


def run_demo(settings: Settings, options: DemoOptions, console: Console) -> DemoResult:
    """Start everything, replay the workload, judge it; stop everything whatever happens."""
    # Fail first, with the install command, if the model is missing; both engines then
    # load the same file (a Q8_0 copy is made here once, not raced by the two engines).
    with console.status("preparing the SmolLM2 weights"):
        gguf = weights_path(
            options.weights or default_encoding(options.backend), announce=console.print
        )
    url = settings.resolved_database_url()
    migrate.upgrade(url)
    sessions = session_factory(engine_from_settings(settings))
    workload = load_workload(limit=options.requests)
    logs = settings.home / "demo-logs"
    logs.mkdir(parents=True, exist_ok=True)
    started: list[EngineProcess | ServerThread] = []
    try:
        engines = _start_engines(options, gguf, logs, started, console)
        # Every state change goes through the routing service, published to the gateways.
        bus = publisher(settings, sessions)
        segments = sorted({w.segment for w in workload})
        rollout_id, alias = _register(sessions, engines, segments, bus)
        app = build_gateway_app(settings)
        gateway = ServerThread(app)
        started.append(gateway)
        base = gateway.start()
        console.print(f"gateway (shadow mode) on {base}; replaying {len(workload)} requests")
        mirrors = MirrorWatch(app, timeout_s=settings.mirror_deadline_s + 30)
        _replay(base, alias, workload, mirrors, console)
        _settle(sessions, rollout_id, options.settle_timeout_s, console)
        gateway.stop()  # flushes spans and drains the in-process evaluations
        started.remove(gateway)
        _settle(sessions, rollout_id, options.settle_timeout_s, console, evaluated=True)
        with transaction(sessions) as session:
            verdict = run_gate(session, rollout_id=rollout_id, publisher=bus)
            _finish(session, rollout_id, bus)
        with sessions() as session:
            rows = summarise(session, rollout_id=rollout_id)
            rollout = service.get_rollout(session, rollout_id=rollout_id)
            look = glance.of_rollout(session, rollout=rollout, verdict=verdict)
        report = _report(sessions, settings, console)
        return DemoResult(rollout_id, rows, verdict, report, look)
    finally:
        for part in reversed(started):
            part.stop()


def _finish(session: Session, rollout_id: int, bus: Publisher | None) -> None:
    """The demo's traffic is over: hold a rollout the gate left running."""
    rollout = service.get_rollout(session, rollout_id=rollout_id)
    if rollout.state is RolloutState.RUNNING:
        routing.change_state(
            session,
            rollout_id=rollout_id,
            action=Action.HOLD,
            actor=ACTOR,
            reason="demo finished; judge it again with more traffic",
            publisher=bus,
        )


def _start_engines(
    options: DemoOptions,
    gguf: Path,
    logs: Path,
    started: list[EngineProcess | ServerThread],
    console: Console,
) -> dict[RouteRole, EngineProcess]:
    cores = cpu_cores()
    # One core per engine, so the two routes never share a core unevenly.
    pin = [str(cores[0]), str(cores[1 % len(cores)])]
    common = ["--model", "smollm2", "--backend", options.backend, "--threads", "1"]
    common += ["--parallel", str(options.parallel)]
    common += ["--gguf", str(gguf)]
    spec = [
        "--speculative",
        "ngram",
        "--num-speculative-tokens",
        str(options.num_speculative_tokens),
    ]
    engines = {
        RouteRole.BASELINE: EngineProcess("baseline", [*common, "--cpus", pin[0]], logs),
        RouteRole.CANDIDATE: EngineProcess("ngram", [*common, *spec, "--cpus", pin[1]], logs),
    }
    started.extend(engines.values())
    with console.status(f"loading {gguf.name} in two engines (plain and n-gram speculative)"):
        for engine in engines.values():
            engine.wait_ready(options.engine_timeout_s)
    for role, engine in engines.items():
        console.print(f"engine {engine.name} ({role.value}) ready on {engine.base_url}")
    return engines


def _register(
    sessions: sessionmaker[Session],
    engines: dict[RouteRole, EngineProcess],
    segments: list[str],
    bus: Publisher | None,
) -> tuple[int, str]:
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    names = {RouteRole.BASELINE: f"demo-{stamp}-plain", RouteRole.CANDIDATE: f"demo-{stamp}-ngram"}
    with transaction(sessions) as session:
        for role, engine in engines.items():
            is_spec = role is RouteRole.CANDIDATE
            service.create_route(
                session,
                spec=RouteIn(
                    name=names[role],
                    base_url=engine.base_url,
                    model="SmolLM2-135M-Instruct",
                    role=role,
                    metrics_url=engine.base_url[:-3] + "/metrics",
                    spec_method="ngram" if is_spec else None,
                    spec_tokens=8 if is_spec else None,
                    spec_config={"provider": "llama.cpp"},
                ),
                actor=ACTOR,
            )
        rollout = service.create_rollout(
            session,
            spec=RolloutIn(
                name=f"demo-{stamp}",
                alias=f"demo-{stamp}",
                baseline_route=names[RouteRole.BASELINE],
                candidate_route=names[RouteRole.CANDIDATE],
                mode=RolloutMode.SHADOW,
                sample_rate=1.0,
                policy=demo_policy(segments),
            ),
            actor=ACTOR,
        )
        routing.change_state(
            session,
            rollout_id=rollout.id,
            action=Action.START,
            actor=ACTOR,
            reason="demo",
            publisher=bus,
        )
        return rollout.id, rollout.alias


def _replay(
    base: str, alias: str, workload: list[WorkloadItem], mirrors: MirrorWatch, console: Console
) -> None:
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    failures = 0
    with Progress(*columns, console=console) as progress, httpx.Client(timeout=300) as client:
        task = progress.add_task("replaying the workload", total=len(workload))
        rng = random.Random()  # fresh seeds: each replay an independent draw (sampled parity)
        for item in workload:
            body = {**item.replay_body(rng), "model": alias, "stream": True}
            with client.stream(
                "POST",
                base + item.path,
                content=orjson.dumps(body),
                headers={"content-type": "application/json"},
            ) as response:
                for _ in response.iter_bytes():
                    pass
                failures += response.status_code != 200
            # The next request waits for this one's mirror: each engine then decodes alone
            # on its core, and the candidate's TTFT is not its queue behind earlier mirrors.
            if not mirrors.wait_idle():
                console.print(
                    f"[yellow]a mirror call still ran {mirrors.timeout_s:.0f} s after its "
                    "request; going on[/yellow]"
                )
            progress.update(task, advance=1, description=f"replaying ({item.segment})")
    if failures:
        console.print(f"[yellow]{failures} requests failed at the gateway[/yellow]")


class MirrorWatch:
    """The in-process gateway's own count of mirror and control calls queued or running."""

    def __init__(self, app: ProxyDispatch, *, timeout_s: float) -> None:
        self.pool = app.api.state.gateway.mirror
        self.timeout_s = timeout_s

    def wait_idle(self) -> bool:
        """Wait until no mirror call is queued or running; False if it took past the timeout."""
        deadline = time.monotonic() + self.timeout_s
        while self.pool.pending:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True


def _settle(
    sessions: sessionmaker[Session],
    rollout_id: int,
    timeout_s: float,
    console: Console,
    *,
    evaluated: bool = False,
) -> None:
    deadline = time.monotonic() + timeout_s
    with console.status("waiting for mirrored calls, spans and evaluations to land"):
        while time.monotonic() < deadline:
            with sessions() as session:
                open_pairs = (
                    session.scalar(
                        select(func.count()).where(
                            Pair.rollout_id == rollout_id, Pair.state == PairState.OPEN
                        )
                    )
                    or 0
                )
                done = session.scalar(select(func.count()).select_from(Evaluation)) or 0
            if open_pairs == 0 and (done or not evaluated):
                return
            time.sleep(0.5)
    console.print("[yellow]some pairs were still open; they count as dropped[/yellow]")


def _report(sessions: sessionmaker[Session], settings: Settings, console: Console) -> Path | None:
    from gate.reports.weekly import build_weekly

    now = datetime.now(UTC).isocalendar()
    week = f"{now.year}-W{now.week:02d}"
    out = settings.home / "reports" / week
    try:
        with transaction(sessions) as session:
            build_weekly(session, week, out_dir=out)
    except Exception as exc:  # the verdict stands even if plotting fails
        console.print(f"[yellow]report not written: {exc}[/yellow]")
        return None
    return out
