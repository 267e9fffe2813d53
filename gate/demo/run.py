"""Run the demo: engines, gateway, replay, then the summary and the verdict."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

import httpx
import orjson
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from gate.db import migrate
from gate.db.engine import engine_from_settings, session_factory, transaction
from gate.db.enums import PairState, RolloutMode, RolloutState, RouteRole
from gate.db.models import Pair, Verdict
from gate.demo.processes import EngineProcess, ServerThread, cpu_cores, terminate_unwinds
from gate.demo.sampled import PROMPT_LOOKUP_MIN, parity_policy, sampled_workload
from gate.demo.summary import ParityCounts, SegmentRow, parity_counts, summarise
from gate.engines.spec import NgramConfig
from gate.engines.weights import default_encoding, weights_path
from gate.engines.workload import WorkloadItem, cycled, load_workload
from gate.gateway.app import ProxyDispatch
from gate.gateway.factory import build_gateway_app
from gate.reports import glance
from gate.reports.glance import Glance
from gate.rollouts import service
from gate.rollouts.schemas import ArmIn, RolloutIn, RouteIn
from gate.rollouts.states import Action
from gate.routing import service as routing
from gate.routing.deployment import publisher
from gate.routing.pubsub import Publisher
from gate.settings import Settings
from gate.verdicts.service import run_gate

ACTOR = "demo"
# Faults the demo can inject into the candidate engine: name -> its extra engine flags.
# Fault injection only, to watch the gate catch a known bug; never a default.
FAULTS: dict[str, list[str]] = {"biased-sampler": ["--verify", "biased-argmax"]}


class Engine(Protocol):
    """What registering a route needs of an engine: where it answers."""

    @property
    def base_url(self) -> str: ...


@dataclass(frozen=True)
class DemoOptions:
    requests: int = 80
    backend: str = "llamacpp"
    num_speculative_tokens: int = 8
    parallel: int = 1  # llama.cpp slots per engine: requests each decodes at once
    weights: str | None = None  # None: the backend's default encoding
    engine_timeout_s: float = 180.0
    settle_timeout_s: float = 180.0
    # Sampled-output parity: the copy-heavy sampled workload, logprobs asked, parity on.
    sampled: bool = False
    fault: str | None = None  # a key of FAULTS, injected into the candidate engine
    warmup_pairs: int = 50  # sampled: the pairs that fix the scale of d, tested by nothing
    # Several n-gram arms against plain (issue 40): their draft lengths, one engine each;
    # empty: one n-gram candidate of `num_speculative_tokens`.
    arms: tuple[int, ...] = ()

    @property
    def parity(self) -> bool:
        """Return whether this run tests sampled-output parity (a fault implies it)."""
        return self.sampled or self.fault is not None


@dataclass(frozen=True)
class DemoResult:
    rollout_id: int
    rows: list[SegmentRow]
    verdict: Verdict
    report_dir: Path | None
    # The answer at a glance of the verdict: what the demo ends with.
    glance: Glance | None = None
    parity: ParityCounts | None = None  # sampled runs: which pairs the parity test could use
    arms: tuple[str, ...] = ()  # a run with arms: their names (the verdict holds the choice)


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
    """Start everything, replay the workload, judge it; stop everything whatever happens
    (SIGTERM included)."""
    with terminate_unwinds():
        return _run(settings, options, console)


def _run(settings: Settings, options: DemoOptions, console: Console) -> DemoResult:
    # Fail first, with the install command, if the model is missing; both engines then
    # load the same file (a Q8_0 copy is made here once, not raced by the two engines).
    with console.status("preparing the SmolLM2 weights"):
        gguf = weights_path(
            options.weights or default_encoding(options.backend), announce=console.print
        )
    if options.parity:  # both sides asked alike, on the sampled pairs' calls only
        settings = settings.model_copy(update={"ask_logprobs": "on"})
    url = settings.resolved_database_url()
    migrate.upgrade(url)
    sessions = session_factory(engine_from_settings(settings))
    workload = _workload(options)
    logs = settings.home / "demo-logs"
    logs.mkdir(parents=True, exist_ok=True)
    started: list[EngineProcess | ServerThread] = []
    try:
        engines, arms = _start_engines(options, gguf, logs, started, console)
        # Every state change goes through the routing service, published to the gateways.
        bus = publisher(settings, sessions)
        policy = _policy(options, workload)
        rollout_id, alias = _register(sessions, engines, options, policy, bus, arms=arms)
        app = build_gateway_app(settings)
        gateway = ServerThread(app)
        started.append(gateway)
        base = gateway.start()
        console.print(f"gateway (shadow mode) on {base}; replaying {len(workload)} requests")
        mirrors = MirrorWatch(app, timeout_s=settings.mirror_deadline_s + 30)
        _replay(base, alias, workload, mirrors, console, lambda: _gate_state(sessions, rollout_id))
        _settle(sessions, rollout_id, options.settle_timeout_s, console)
        _save_metrics(arms, logs, console)
        gateway.stop()  # flushes spans and drains the in-process evaluations
        started.remove(gateway)
        _settle(sessions, rollout_id, options.settle_timeout_s, console, evaluated=True)
        with transaction(sessions) as session:
            verdict = run_gate(session, rollout_id=rollout_id, publisher=bus)
            _finish(session, rollout_id, bus)
        with sessions() as session:
            rows = summarise(session, rollout_id=rollout_id)
            parity = parity_counts(session, rollout_id=rollout_id) if options.parity else None
            rollout = service.get_rollout(session, rollout_id=rollout_id)
            look = glance.of_rollout(session, rollout=rollout, verdict=verdict)
        report = _report(sessions, settings, console)
        return DemoResult(rollout_id, rows, verdict, report, look, parity, tuple(arms))
    finally:
        for part in reversed(started):
            part.stop()


def _workload(options: DemoOptions) -> list[WorkloadItem]:
    if options.parity:
        return sampled_workload(options.requests)
    return cycled(load_workload(), options.requests)


def _policy(options: DemoOptions, workload: list[WorkloadItem]) -> dict[str, object]:
    if options.parity:
        return parity_policy(options.warmup_pairs)
    return demo_policy(sorted({w.segment for w in workload}))


def _gate_state(sessions: sessionmaker[Session], rollout_id: int) -> tuple[bool, str]:
    """Return whether the rollout still runs (the embedded periodic gate judges it every
    minute and may kill it) and its latest verdict in a few words."""
    with sessions() as session:
        state = service.get_rollout(session, rollout_id=rollout_id).state
        verdict = session.scalars(
            select(Verdict).where(Verdict.rollout_id == rollout_id).order_by(Verdict.id.desc())
        ).first()
    if verdict is None:
        return state is RolloutState.RUNNING, "gate: not judged yet"
    return state is RolloutState.RUNNING, f"gate: {verdict.decision.value} at {verdict.n_pairs}"


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
) -> tuple[dict[RouteRole, EngineProcess], dict[str, EngineProcess]]:
    """Start the baseline and the candidate engine, or (`options.arms`) one per arm."""
    cores = cpu_cores()
    # One core for the baseline, one for the speculative side: each request is mirrored to
    # one arm and waits for its mirror, so the arms' engines never decode at once.
    pin = [str(cores[0]), str(cores[1 % len(cores)])]
    common = ["--model", "smollm2", "--backend", options.backend, "--threads", "1"]
    common += ["--parallel", str(options.parallel)]
    common += ["--gguf", str(gguf)]

    def spec(k: int, lookup: list[str]) -> list[str]:
        flags = ["--speculative", "ngram", "--num-speculative-tokens", str(k), *lookup]
        return [*common, *flags, *_candidate_flags(options), "--cpus", pin[1]]

    engines = {RouteRole.BASELINE: EngineProcess("baseline", [*common, "--cpus", pin[0]], logs)}
    arms = {
        arm_name(k): EngineProcess(f"ngram-{arm_name(k)}", spec(k, arm_lookup(k)), logs)
        for k in options.arms
    }
    if not arms:
        candidate = EngineProcess("ngram", spec(options.num_speculative_tokens, []), logs)
        engines[RouteRole.CANDIDATE] = candidate
    every = [*engines.values(), *arms.values()]
    started.extend(every)
    what = "n-gram speculative" + (f", FAULT INJECTED: {options.fault}" if options.fault else "")
    if arms:
        what = "n-gram arms " + ", ".join(arms)
    with console.status(f"loading {gguf.name} in {len(every)} engines (plain and {what})"):
        for engine in every:
            engine.wait_ready(options.engine_timeout_s)
    roles = [(role.value, e) for role, e in engines.items()] + [("arm", e) for e in arms.values()]
    for role, engine in roles:
        console.print(f"engine {engine.name} ({role}) ready on {engine.base_url}")
    return engines, arms


def arm_name(k: int) -> str:
    """Return the name of the demo's n-gram arm drafting `k` tokens."""
    return f"k{k}"


def _save_metrics(arms: Mapping[str, EngineProcess], logs: Path, console: Console) -> None:
    """Keep each arm engine's /metrics, so `specgate gate advise --metrics FILE` can read it
    after the engines stopped."""
    for name, engine in arms.items():
        path = logs / f"metrics-{name}.txt"
        try:
            path.write_text(httpx.get(engine.base_url[:-3] + "/metrics", timeout=10).text)
        except httpx.HTTPError as exc:
            console.print(f"[yellow]metrics of arm {name} not saved: {exc}[/yellow]")
            continue
        console.print(f"arm {name}: engine metrics in {path}")


def arm_lookup(k: int) -> list[str]:
    """Return an arm's lookup flags: n = 3 (the engine's default), or k where k is shorter,
    since llama.cpp drafts nothing with a draft shorter than its lookup n
    (`gate.engines.local.check_llamacpp_lookup`)."""
    n = str(min(k, NgramConfig().prompt_lookup_max))
    return ["--prompt-lookup-min", n, "--prompt-lookup-max", n]


def _candidate_flags(options: DemoOptions) -> list[str]:
    """Return the candidate engine's extra flags: the sampled run's lookup, the fault."""
    flags = ["--prompt-lookup-min", str(PROMPT_LOOKUP_MIN)] if options.parity else []
    return [*flags, *FAULTS.get(options.fault or "", [])]


def _register(
    sessions: sessionmaker[Session],
    engines: Mapping[RouteRole, Engine],
    options: DemoOptions,
    policy: dict[str, object],
    bus: Publisher | None,
    *,
    arms: Mapping[str, Engine] | None = None,
) -> tuple[int, str]:
    """Register the engines' routes and start a shadow rollout of the candidate, or of the
    arms (`arms`: name -> engine, in `options.arms` order; `engines` then holds the
    baseline only)."""
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    plain = f"demo-{stamp}-plain"
    routes: list[tuple[str, RouteRole, int | None, Engine]] = [
        (plain, RouteRole.BASELINE, None, engines[RouteRole.BASELINE])
    ]
    if RouteRole.CANDIDATE in engines:
        routes.append((f"demo-{stamp}-ngram", RouteRole.CANDIDATE,
                       options.num_speculative_tokens, engines[RouteRole.CANDIDATE]))  # fmt: skip
    arm_routes = {name: f"demo-{stamp}-ngram-{name}" for name in arms or {}}
    for (name, engine), k in zip((arms or {}).items(), options.arms, strict=False):
        routes.append((arm_routes[name], RouteRole.CANDIDATE, k, engine))
    with transaction(sessions) as session:
        for name, role, tokens, engine in routes:
            service.create_route(session, spec=_route(name, role, tokens, engine), actor=ACTOR)
        rollout = service.create_rollout(
            session,
            spec=RolloutIn(
                name=f"demo-{stamp}",
                alias=f"demo-{stamp}",
                baseline_route=plain,
                candidate_route=None if arm_routes else f"demo-{stamp}-ngram",
                arms=[ArmIn(name=n, route=r) for n, r in arm_routes.items()] or None,
                mode=RolloutMode.SHADOW,
                sample_rate=1.0,
                policy=policy,
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


def _route(name: str, role: RouteRole, spec_tokens: int | None, engine: Engine) -> RouteIn:
    return RouteIn(
        name=name,
        base_url=engine.base_url,
        model="SmolLM2-135M-Instruct",
        role=role,
        metrics_url=engine.base_url[:-3] + "/metrics",
        spec_method="ngram" if spec_tokens else None,
        spec_tokens=spec_tokens,
        spec_config={"provider": "llama.cpp"},
    )


def _replay(
    base: str,
    alias: str,
    workload: list[WorkloadItem],
    mirrors: MirrorWatch,
    console: Console,
    gate: Callable[[], tuple[bool, str]],
) -> None:
    """Send the workload one request at a time; stop early once the gate ended the rollout."""
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
            # Streamed unless the workload says otherwise (the sampled one is not: the
            # gateway asks for logprobs on non-streamed calls).
            body = {"stream": True, **item.replay_body(rng), "model": alias}
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
            running, seen = gate()
            progress.update(task, advance=1, description=f"replaying ({item.segment}; {seen})")
            if not running:
                done = int(progress.tasks[task].completed)
                console.print(f"the gate ended the rollout after {done} requests; replay stopped")
                break
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
    """Wait until no pair is open (and, `evaluated`, every closed pair's evaluations landed)."""
    deadline = time.monotonic() + timeout_s
    waiting = Pair.state == PairState.OPEN
    if evaluated:  # a pair no evaluator applies to is marked evaluated all the same
        waiting = waiting | Pair.evaluated_at.is_(None)
    query = select(func.count()).where(Pair.rollout_id == rollout_id, waiting)
    with console.status("waiting for mirrored calls, spans and evaluations to land"):
        while time.monotonic() < deadline:
            with sessions() as session:
                if not session.scalar(query):
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
