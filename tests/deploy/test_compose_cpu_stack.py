"""The Compose stack's `cpu` profile, run without Docker: every specgate service of
deploy/compose/compose.yaml is started from its own command and environment as a process
on 127.0.0.1, against the real Postgres and Redis; traffic goes through the gateway and
`specgate gate check` reaches a verdict.

What differs from `docker compose --profile cpu up`, and why:
- Postgres and Redis are the test servers (a throwaway database, Redis db 15), not images.
- otel-collector, Prometheus and Grafana are not started (images; vLLM's spans are the only
  thing the otel-collector carries, and the cpu profile has no vLLM).
- The two engines run `specgate engine --model sim` instead of llama.cpp: the synthetic
  engine answers in milliseconds, and the candidate is made to fail (HTTP 500) so that a
  decisive verdict, a kill, comes within seconds. Their port, host and served name are the
  compose file's.
- Test-only speed-ups, all real settings: the beat's scrape every 2 s, one gateway
  process and one Celery process per worker (2 cores here); and a small gate policy (one
  declared segment, a short warm-up), passed as operators do with `rollout create --policy`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from gate.db.engine import make_engine, session_factory
from gate.db.enums import Decision, RolloutState
from gate.db.models import (
    AuditEvent,
    EngineSample,
    Evaluation,
    Generation,
    Rollout,
    SpanRecord,
    Verdict,
)
from gate.settings import Settings
from tests.conftest import create_database, drop_database
from tests.deploy import compose
from tests.servers import closed_port

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

VARIABLES = {
    "POSTGRES_PASSWORD": "replaced-by-the-test-database",
    "GRAFANA_DB_PASSWORD": "not-started",
    "GRAFANA_ADMIN_PASSWORD": "not-started",
    "SPECGATE_SECRET_KEY": "cpu-profile-test-secret",
    "SPECGATE_GATEWAY_WORKERS": "1",
    "WORKER_CONCURRENCY": "1",
}
# The beat's gate keeps its default interval (60 s), so the verdict here is the one
# `specgate gate check` reaches, as in a deploy pipeline.
FAST = {
    "SPECGATE_SCRAPE_INTERVAL_S": "2",
    "SPECGATE_STATE_POLL_INTERVAL_S": "1",
}
SIM = {
    "engine-baseline": ["--model", "sim", "--tokens", "12", "--ttft-ms", "5"],
    "engine-candidate": [
        *("--model", "sim", "--tokens", "12", "--ttft-ms", "5"),
        *("--num-speculative-tokens", "4", "--acceptance", "0.6", "--failure", "status500"),
    ],
}
POLICY = "segments: [chat]\nwarmup_pairs: 20\nmin_pairs: 100\nmin_duration_s: 0\nstages: [100]\n"
NOT_STARTED = {"postgres", "redis", "otel-collector", "prometheus", "grafana"}
KEPT_ENGINE_OPTIONS = ("--served-model-name", "--host", "--port")


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def tail(self, chars: int = 2500) -> str:
        return self.log.read_text(errors="replace")[-chars:]


class Stack:
    """Processes started by the test, each in its own process group, all stopped at the end."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.procs: list[Proc] = []

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> Proc:
        log = self.folder / f"{name}.log"
        with log.open("wb") as sink:
            popen = subprocess.Popen(
                argv, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
            )
        proc = Proc(name, popen, log)
        self.procs.append(proc)
        return proc

    def run(self, name: str, argv: list[str], env: dict[str, str], timeout: float) -> Proc:
        proc = self.start(name, argv, env)
        try:
            proc.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{name} did not finish in {timeout}s:\n{proc.tail()}", pytrace=False)
        assert proc.popen.returncode == 0, f"{name} exited {proc.popen.returncode}:\n{proc.tail()}"
        return proc

    def stop(self) -> None:
        for proc in self.procs:
            if proc.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.popen.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.popen.wait(15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.popen.pid, signal.SIGKILL)
                proc.popen.wait(5)

    def logs(self) -> str:
        return "\n".join(f"--- {p.name} (rc={p.popen.poll()}):\n{p.tail(1200)}" for p in self.procs)


def wait_http(url: str, timeout: float, proc: Proc) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.popen.poll() is not None:
            pytest.fail(f"{proc.name} exited before {url} answered:\n{proc.tail()}", pytrace=False)
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=1).status_code == 200:
                return
        time.sleep(0.2)
    pytest.fail(f"{url} ({proc.name}) not ready in {timeout}s:\n{proc.tail()}", pytrace=False)


def sim_command(name: str, command: list[str]) -> list[str]:
    """The engine's command with its llama.cpp model swapped for the synthetic engine."""
    assert command[0] == "engine" and "llamacpp" in command, command
    kept = []
    for option in KEPT_ENGINE_OPTIONS:
        kept += [option, command[command.index(option) + 1]]
    return ["engine", *SIM[name], *kept]


@dataclass
class Plan:
    services: dict[str, dict[str, Any]]
    translation: compose.Translation
    ports: dict[str, int]


def plan(tmp_path: Path) -> Plan:
    """Pick the cpu profile's specgate services and map their names, ports and mounts."""
    services_all = compose.load(VARIABLES)["services"]
    in_cpu = {n: s for n, s in services_all.items() if compose.in_profile(s, "cpu")}
    services = {n: s for n, s in in_cpu.items() if compose.is_specgate(s)}
    assert set(in_cpu) - set(services) == NOT_STARTED
    translation = compose.Translation()
    ports: dict[str, int] = {}
    for name, service in services.items():
        port = compose.listen_port(service.get("command") or [])
        if port is None:
            continue
        ports[name] = closed_port()
        for host in compose.network_names(name, service):
            translation.hosts[f"{host}:{port}"] = f"127.0.0.1:{ports[name]}"
    for name, service in services.items():
        for volume in service.get("volumes") or []:
            if not isinstance(volume, str) or not volume.startswith("./"):
                continue  # named volumes: SPECGATE_HOME is a folder of the test instead
            source, target = volume.split(":")[:2]
            local = tmp_path / "mounts" / name / Path(source).name
            local.parent.mkdir(parents=True, exist_ok=True)
            local.write_text(translation.text((compose.COMPOSE_DIR / source).read_text()))
            translation.paths[target] = str(local)
    return Plan(services, translation, ports)


def environment(
    name: str, service: dict[str, Any], p: Plan, db_url: str, redis_url: str, home: Path
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECGATE_")}
    for key, value in (service.get("environment") or {}).items():
        text = str(value)
        if key == "SPECGATE_DATABASE_URL":
            assert text.startswith("postgresql+psycopg://specgate:") and "@postgres:5432/" in text
            text = db_url
        elif key == "SPECGATE_REDIS_URL":
            assert text.startswith("redis://redis:6379/")
            text = redis_url
        elif key == "SPECGATE_HOME":
            (home / name).mkdir(parents=True, exist_ok=True)
            text = str(home / name)
        else:
            text = p.translation.text(text)
            own = compose.listen_port(service.get("command") or [])
            if own is not None:  # the container's own loopback port
                text = text.replace(f"127.0.0.1:{own}/", f"127.0.0.1:{p.ports[name]}/")
        env[key] = text
    env.update(FAST)
    return env


@contextlib.contextmanager
def throwaway_database(pg_server) -> Iterator[str]:
    url = create_database(pg_server, prefix="specgate_compose")
    try:
        yield url
    finally:
        drop_database(pg_server, url)


class Traffic(threading.Thread):
    """Chat requests to the gateway until stopped, bounded in count and time."""

    def __init__(self, base: str, alias: str, limit: int = 800, seconds: float = 100.0) -> None:
        super().__init__(daemon=True)
        self.base, self.alias, self.limit, self.seconds = base, alias, limit, seconds
        self.stop = threading.Event()
        self.statuses: list[int] = []

    def run(self) -> None:
        deadline = time.monotonic() + self.seconds
        with httpx.Client(base_url=self.base, timeout=10) as client:
            for i in range(self.limit):
                if self.stop.is_set() or time.monotonic() > deadline:
                    return
                body = {
                    "model": self.alias,
                    "max_tokens": 12,
                    "temperature": 0,
                    "messages": [{"role": "user", "content": f"Say hello to visitor {i}."}],
                }
                try:
                    self.statuses.append(client.post("/v1/chat/completions", json=body).status_code)
                except httpx.HTTPError:
                    self.statuses.append(0)


def killed_gauge(base: str) -> float | None:
    for line in httpx.get(base + "/metrics", timeout=2).text.splitlines():
        if line.startswith("specgate_gateway_rollout_killed{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_the_cpu_profile_runs_end_to_end_to_a_verdict(pg_server, redis_url, tmp_path):
    assert set(FAST) <= {f"SPECGATE_{f.upper()}" for f in Settings.model_fields}
    p = plan(tmp_path)
    executable = compose.specgate_executable()
    stack = Stack(tmp_path)
    with throwaway_database(pg_server) as db_url:
        try:
            envs = {
                name: environment(name, s, p, db_url, redis_url, tmp_path / "home")
                for name, s in p.services.items()
            }
            for name in compose.start_order(p.services):
                service = p.services[name]
                command = p.translation.command(service["command"], p.ports.get(name))
                if name in SIM:
                    command = sim_command(name, command)
                if service.get("restart") == "no":  # one-shot jobs: migrate, register-cpu
                    stack.run(name, [executable, *command], envs[name], timeout=90)
                    continue
                proc = stack.start(name, [executable, *command], envs[name])
                if name in SIM:
                    wait_http(f"http://127.0.0.1:{p.ports[name]}/v1/models", 30, proc)
                elif "HEALTHCHECK_URL" in envs[name]:
                    wait_http(envs[name]["HEALTHCHECK_URL"], 45, proc)
            gateway = f"http://127.0.0.1:{p.ports['gateway']}"
            operator = envs["migrate"]

            def specgate(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
                return subprocess.run(
                    [executable, *args],
                    env={**operator, "NO_COLOR": "1", "COLUMNS": "200"},
                    capture_output=True,
                    text=True,
                    timeout=timeout,
                )

            routes = yaml_routes(p)
            policy = tmp_path / "policy.yaml"
            policy.write_text(POLICY)
            created = specgate(
                "rollout", "create", "--name", "cpu-profile", "--alias", routes["alias"],
                "--baseline", routes["baseline"]["name"],
                "--candidate", routes["candidate"]["name"], "--sample-rate", "1.0",
                "--policy", str(policy),
            )  # fmt: skip
            assert created.returncode == 0, created.stderr
            rollout_id = created.stdout.split()[1]
            assert specgate("rollout", "start", rollout_id).returncode == 0
            assert specgate("gate", "check", "--rollout", rollout_id).returncode == 2

            traffic = Traffic(gateway, routes["alias"])
            traffic.start()
            try:
                # The CI command (deploy/ci), with --json to read the verdict.
                verdict = specgate(
                    "gate", "check", "--rollout", rollout_id,
                    "--wait", "--timeout", "75s", "--interval", "2s", "--json",
                    timeout=100,
                )  # fmt: skip
            finally:
                traffic.stop.set()
                traffic.join(15)
            assert verdict.returncode == 1, verdict.stdout + verdict.stderr + stack.logs()
            assert json.loads(verdict.stdout.strip().splitlines()[-1])["decision"] == "kill"

            # Shadow mode: clients were answered by the baseline throughout.
            assert traffic.statuses and set(traffic.statuses) == {200}, traffic.statuses[-20:]
            # The kill reached the gateway (Redis pub/sub, DB poll as fallback).
            deadline = time.monotonic() + 10
            while killed_gauge(gateway) != 1.0 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert killed_gauge(gateway) == 1.0
            after = httpx.post(
                gateway + "/v1/chat/completions",
                json={"model": routes["alias"], "messages": [{"role": "user", "content": "hi"}]},
                timeout=10,
            )
            assert after.status_code == 200

            engine = make_engine(db_url)
            with session_factory(engine)() as db:
                rollout = db.get(Rollout, int(rollout_id))
                assert rollout is not None and rollout.state is RolloutState.KILLED
                kill = db.scalars(select(AuditEvent).where(AuditEvent.action == "kill")).one()
                assert kill.actor == "gate"
                # Killed on the candidate's failures.
                verdicts = db.scalars(
                    select(Verdict).where(Verdict.decision == Decision.KILL)
                ).all()
                assert verdicts and any("failures" in c for c in verdicts[0].reason_codes)
                # The collector wrote the gateway's spans; they became generations.
                assert db.scalar(select(func.count()).select_from(SpanRecord)) > 0
                assert db.scalar(select(func.count()).select_from(Generation)) > 0
                # The Celery worker evaluated completed pairs.
                deadline = time.monotonic() + 15
                while not db.scalar(select(func.count()).select_from(Evaluation)):
                    assert time.monotonic() < deadline, "no evaluation stored\n" + stack.logs()
                    time.sleep(0.5)
                # The beat scraped both engines' /metrics.
                scraped = db.scalar(select(func.count(func.distinct(EngineSample.route_id))))
                assert scraped == 2
            engine.dispose()
        finally:
            stack.stop()


def yaml_routes(p: Plan) -> dict[str, Any]:
    import yaml

    return yaml.safe_load(Path(p.translation.paths["/etc/specgate/routes.yaml"]).read_text())
