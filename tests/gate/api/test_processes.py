"""The control API and gateways as separate processes: fuzzing, and the kill switch."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import pytest

from gate.db import migrate
from gate.db.engine import make_engine, session_factory
from gate.engines.sim import SimLog, SimProfile, create_sim_app
from gate.keys.service import create_key
from tests import factories
from tests.conftest import create_database, drop_database
from tests.servers import TcpProxy, closed_port, serving, span_sink
from tests.waits import wait_until

SECRET = "process-secret"


@contextmanager
def specgate_serve(
    database_url: str, *, embedded: bool = False, otlp_endpoint: str | None = None, **env: str
):
    """Run `specgate serve`; spans go to `otlp_endpoint`, else to a sink that accepts them,
    or stay in process when `embedded` (a closed port would make every shutdown wait on
    export retries)."""
    with ExitStack() as stack:
        sink = None if embedded else otlp_endpoint or stack.enter_context(serving(span_sink()))
        yield stack.enter_context(_serve(database_url, sink, env))


@contextmanager
def _serve(database_url: str, otlp: str | None, env: dict[str, str]):
    port = closed_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gate",
            "serve",
            "--port",
            str(port),
            "--database-url",
            database_url,
            *([] if otlp is None else ["--otlp-endpoint", otlp]),
        ],
        env={**os.environ, "SPECGATE_SECRET_KEY": SECRET, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    with _healthy(proc, f"http://127.0.0.1:{port}") as base:
        yield base


@contextmanager
def _healthy(proc: subprocess.Popen[bytes], base: str) -> Iterator[str]:
    """Yield `base` once the process answers /healthz; stop the process afterwards."""
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        else:
            raise RuntimeError(proc.stderr.read().decode() if proc.stderr else "no start")
        yield base
    finally:
        stop(proc)


def stop(proc: subprocess.Popen[bytes], deadline_s: float = 30) -> None:
    """Stop `proc` with SIGTERM; one that outlives the deadline fails the test with its
    threads' stacks (`kill -USR1`, PRODUCTION.md's Logs), so a hang says where it is."""
    proc.terminate()
    try:
        proc.wait(deadline_s)
        return
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGUSR1)
        time.sleep(1)  # the stack dump is written by the process itself
        proc.kill()
        _, err = proc.communicate()
    raise AssertionError(f"the process outlived SIGTERM by {deadline_s}s:\n{err.decode()[-20000:]}")


@contextmanager
def specgate_collect(database_url: str) -> Iterator[str]:
    """Run `specgate collect` (evaluations in process: no Redis); yield its OTLP URL."""
    port = closed_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECGATE_")}
    env["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gate",
            "collect",
            "--port",
            str(port),
            "--database-url",
            database_url,
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    with _healthy(proc, f"http://127.0.0.1:{port}") as base:
        yield base + "/v1/traces"


def admin_token(url: str) -> str:
    factory = session_factory(make_engine(url))
    with factory() as db, db.begin():
        return create_key(
            db, name=f"k{time.monotonic_ns()}", scopes=["admin"], secret_key=SECRET, actor="test"
        )[1]


@pytest.fixture
def fresh_pg_url(pg_server):
    url = create_database(pg_server, prefix="specgate_fuzz")
    migrate.upgrade(url)
    yield url
    drop_database(pg_server, url)


@pytest.mark.postgres
def test_schemathesis_with_every_check_finds_no_failure(fresh_pg_url, tmp_path):
    """The README's fuzz command with all of schemathesis' checks, on a fresh database."""
    token = admin_token(fresh_pg_url)
    with session_factory(make_engine(fresh_pg_url))() as db, db.begin():
        factories.rollout(db, name="fuzzed")
    schemathesis = shutil.which("schemathesis", path=str(Path(sys.executable).parent))
    assert schemathesis, "install '.[dev]' (schemathesis)"
    with specgate_serve(fresh_pg_url) as base:
        result = subprocess.run(
            [
                schemathesis,
                "--config-file",
                str(Path(__file__).with_name("schemathesis.toml")),
                "run",
                f"{base}/openapi.json",
                "--checks",
                "all",
                # The one documented exception: see schemathesis.toml.
                "--exclude-checks",
                "ensure_resource_availability",
                "-H",
                f"Authorization: Bearer {token}",
                "-n",
                "20",
                "--seed",
                "1",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
            env={**os.environ, "NO_COLOR": "1"},
        )
    assert result.returncode == 0, result.stdout[-6000:]


def killed_gauge(base: str) -> str | None:
    for line in httpx.get(base + "/metrics", timeout=2).text.splitlines():
        if line.startswith("specgate_gateway_rollout_killed{"):
            return line.rsplit(" ", 1)[1]
    return None


def pushed_to(base: str) -> bool:
    """Whether a gateway is subscribed to routing changes (its /healthz says so)."""
    return bool(httpx.get(base + "/healthz", timeout=2).json()["pubsub_connected"])


def wait_killed(bases: list[str], value: str, timeout: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if all(killed_gauge(b) == value for b in bases):
            return time.monotonic() - started
        time.sleep(0.02)
    raise AssertionError(f"gateways did not reach killed={value} within {timeout}s")


@pytest.mark.redis
def test_a_kill_through_the_api_stops_mirroring_in_two_gateways(tmp_path, redis_url):
    url = f"sqlite:///{tmp_path}/store.db"
    migrate.upgrade(url)
    candidate = SimLog()
    proxy = TcpProxy("127.0.0.1", 6379)
    proxied_redis = f"redis://127.0.0.1:{proxy.port}/{redis_url.rsplit('/', 1)[1]}"
    with ExitStack() as stack:
        base_url = stack.enter_context(serving(create_sim_app(SimProfile())))
        cand_url = stack.enter_context(serving(create_sim_app(SimProfile(), candidate)))
        factory = session_factory(make_engine(url))
        with factory() as db, db.begin():
            rollout = factories.running_rollout(
                db,
                name="smol",
                base_url=base_url + "/v1",
                candidate_url=cand_url + "/v1",
                sample_rate=1.0,
                policy={"stages": [100]},
            )
        token = admin_token(url)
        env = {
            "SPECGATE_REDIS_URL": proxied_redis,
            "SPECGATE_STATE_POLL_INTERVAL_S": "1.0",
            "SPECGATE_CONTROL_RATE": "0",
        }
        gateways = [stack.enter_context(specgate_serve(url, **env)) for _ in range(2)]
        auth = {"Authorization": f"Bearer {token}"}
        body = {"model": "smol", "messages": [{"role": "user", "content": "hi"}]}

        def traffic(expected: int) -> int:
            """Mirrored calls among six requests: wait for `expected`, or 0.5 s for strays."""
            before = len(candidate.bodies)
            for gateway in gateways:
                for _ in range(3):
                    assert (
                        httpx.post(gateway + "/v1/chat/completions", json=body).status_code == 200
                    )
            deadline = time.monotonic() + (10 if expected else 0.5)
            while len(candidate.bodies) - before < (expected or 1) and time.monotonic() < deadline:
                time.sleep(0.02)
            return len(candidate.bodies) - before

        wait_killed(gateways, "0.0", 10)
        assert wait_until(lambda: all(pushed_to(g) for g in gateways), timeout=10)
        assert traffic(6) == 6, "both gateways mirror while running"
        kill = httpx.post(
            f"{gateways[0]}/v1/rollouts/{rollout.id}/kill",
            json={"reason": "acceptance collapse"},
            headers=auth,
        )
        assert kill.status_code == 200
        # Pushed, or at the latest polled (that pub/sub pushes is test_sync's business).
        wait_killed(gateways, "1.0", 10)
        assert traffic(0) == 0, "a killed rollout must not mirror"

        resumed = httpx.post(
            f"{gateways[0]}/v1/rollouts/{rollout.id}/resume", json={"reason": "retry"}, headers=auth
        )
        assert resumed.status_code == 200
        wait_killed(gateways, "0.0", 3.0)
        proxy.cut()  # Redis unreachable: gateways must fall back to polling
        httpx.post(
            f"{gateways[0]}/v1/rollouts/{rollout.id}/kill",
            json={"reason": "redis down"},
            headers=auth,
        )
        wait_killed(gateways, "1.0", 10)  # by polling: Redis is cut
        assert traffic(0) == 0
    proxy.close()
