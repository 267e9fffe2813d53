"""`specgate routes launch`: the vLLM command lines of the route files, the install hint
without vLLM, registration of running servers (idempotent), the readiness timeout, and the
whole launch with a stand-in `vllm` executable that serves the synthetic engine."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
import yaml
from sqlalchemy import select
from typer.testing import CliRunner

from gate.cli import app
from gate.cli.exits import DATA_ERROR
from gate.db.engine import make_engine, session_factory
from gate.db.enums import RouteRole
from gate.db.models import Route
from gate.engines.sim import SimProfile, create_sim_app
from tests.deploy.compose import ROOT, specgate_executable
from tests.servers import closed_port, serving

ROUTE_FILES = sorted((ROOT / "deploy" / "routes").glob("*.yaml")) + sorted(
    (ROOT / "deploy" / "compose" / "routes").glob("*.yaml")
)


def specgate(*args: str, env: dict[str, str] | None = None, timeout: float = 60):
    return subprocess.run(
        [specgate_executable(), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "NO_COLOR": "1", **(env or {})},
    )


def route_file(tmp_path: Path, base: str, cand: str, **extra) -> Path:
    data = {
        "alias": "smol",
        "host": "127.0.0.1",
        "baseline": {"name": "smol-base", "model": "m", "port": 1, "url": base},
        "candidate": {
            "name": "smol-ngram",
            "model": "m",
            "port": 2,
            "url": cand,
            "speculative_config": {"method": "ngram", "num_speculative_tokens": 4},
        },
        **extra,
    }
    path = tmp_path / f"routes-{time.monotonic_ns()}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("path", ROUTE_FILES, ids=lambda p: p.name)
def test_dry_run_prints_the_two_vllm_commands(path):
    result = CliRunner().invoke(app, ["routes", "launch", "-f", str(path), "--dry-run"])
    assert result.exit_code == 0, result.output
    baseline, candidate = (shlex.split(line) for line in result.stdout.splitlines())
    routes = yaml.safe_load(path.read_text())
    for argv, entry in ((baseline, routes["baseline"]), (candidate, routes["candidate"])):
        assert argv[:3] == ["vllm", "serve", entry["model"]]
        assert argv[argv.index("--port") + 1] == str(entry["port"])
        # The route's name first (vLLM's metrics label), then the alias the gateway asks for.
        at = argv.index("--served-model-name")
        assert argv[at + 1 : at + 3] == [entry["name"], routes["alias"]]
        assert "--enable-per-request-metrics" in argv
        if routes.get("otlp_traces_endpoint"):
            at = argv.index("--otlp-traces-endpoint")
            assert argv[at + 1] == routes["otlp_traces_endpoint"]
        assert argv[len(argv) - len(entry.get("args", [])) :] == entry.get("args", [])
    assert "--speculative-config" not in baseline
    assert "--per-request-spec-decode-metrics" not in baseline
    spec = json.loads(candidate[candidate.index("--speculative-config") + 1])
    assert spec == routes["candidate"]["speculative_config"]
    at = candidate.index("--per-request-spec-decode-metrics")
    assert candidate[at + 1] == "summary"


def test_the_examples_cover_ngram_draft_model_and_eagle3():
    methods = {
        yaml.safe_load(p.read_text())["candidate"]["speculative_config"]["method"]
        for p in ROUTE_FILES
    }
    assert {"ngram", "draft_model", "eagle3"} <= methods


def test_without_vllm_it_says_how_to_install_it(sqlite_url):
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip(reason="vLLM is installed here")
    path = ROOT / "deploy" / "routes" / "llama-8b-ngram.yaml"
    result = specgate("routes", "launch", "-f", str(path), "--database-url", sqlite_url)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'specgate[vllm]'" in lines[0], result.stderr


def test_a_bad_route_file_is_one_line_and_a_data_error(tmp_path, sqlite_url):
    path = route_file(tmp_path, "http://127.0.0.1:1/v1", "http://127.0.0.1:2/v1")
    data = yaml.safe_load(path.read_text())
    data["baseline"]["speculative_config"] = {"method": "ngram"}
    path.write_text(yaml.safe_dump(data))
    result = specgate("routes", "launch", "-f", str(path), "--dry-run")
    assert result.returncode == DATA_ERROR
    assert "the baseline must not have a speculative_config" in result.stderr


def test_no_start_registers_running_servers_once(tmp_path, sqlite_url):
    with ExitStack() as stack:
        base = stack.enter_context(serving(create_sim_app(SimProfile())))
        cand = stack.enter_context(serving(create_sim_app(SimProfile(spec_tokens=4))))
        path = route_file(tmp_path, base + "/v1", cand + "/v1")
        args = ("routes", "launch", "-f", str(path), "--no-start", "--database-url", sqlite_url)
        first = specgate(*args, "--ready-timeout", "20s")
        assert first.returncode == 0, first.stderr
        assert "smol-base is ready" in first.stdout and "route 2 smol-ngram" in first.stdout
        again = specgate(*args)
        assert again.returncode == 0 and again.stdout.count("already registered") == 2
        moved = route_file(tmp_path, base + "/v1", base + "/v1")
        conflict = specgate(
            "routes", "launch", "-f", str(moved), "--no-start", "--database-url", sqlite_url
        )
        assert conflict.returncode == 1 and "already registered with another" in conflict.stderr
    engine = make_engine(sqlite_url)
    with session_factory(engine)() as db:
        routes = {r.name: r for r in db.scalars(select(Route))}
    engine.dispose()
    assert set(routes) == {"smol-base", "smol-ngram"}
    candidate = routes["smol-ngram"]
    assert candidate.role is RouteRole.CANDIDATE and candidate.model == "smol"
    assert candidate.base_url == cand + "/v1" and candidate.metrics_url == cand + "/metrics"
    assert (candidate.spec_method, candidate.spec_tokens) == ("ngram", 4)
    assert routes["smol-base"].spec_method is None


def test_api_key_registers_routes_with_a_credential_reference_only(tmp_path, sqlite_url):
    from tests.gate.gateway.conftest import bearer_only

    with ExitStack() as stack:
        base = stack.enter_context(serving(bearer_only("k3y", create_sim_app(SimProfile()))))
        cand = stack.enter_context(serving(bearer_only("k3y", create_sim_app(SimProfile()))))
        path = route_file(tmp_path, base + "/v1", cand + "/v1")
        args = ("routes", "launch", "-f", str(path), "--no-start", "--database-url", sqlite_url)
        env = {"SPECGATE_ROUTE_KEY": "k3y"}
        result = specgate(
            *args, "--api-key", "env:SPECGATE_ROUTE_KEY", "--ready-timeout", "20s", env=env
        )
        assert result.returncode == 0, result.stderr
        listed = specgate("routes", "list", "--database-url", sqlite_url, env={"COLUMNS": "300"})
    assert "env:SPECGATE_ROUTE_KEY" in listed.stdout and "k3y" not in listed.stdout + result.stdout
    engine = make_engine(sqlite_url)
    with session_factory(engine)() as db:
        auths = {r.name: r.auth for r in db.scalars(select(Route))}
    engine.dispose()
    reference = {"header": "Authorization", "source": "env:SPECGATE_ROUTE_KEY"}
    assert auths == {"smol-base": reference, "smol-ngram": reference}


def test_servers_that_never_answer_time_out(tmp_path, sqlite_url):
    path = route_file(
        tmp_path, f"http://127.0.0.1:{closed_port()}/v1", f"http://127.0.0.1:{closed_port()}/v1"
    )
    started = time.monotonic()
    result = specgate(
        "routes", "launch", "-f", str(path), "--no-start", "--ready-timeout", "2s",
        "--database-url", sqlite_url,
    )  # fmt: skip
    assert result.returncode == 1 and "not ready after 2s" in result.stderr
    assert time.monotonic() - started < 30


FAKE_VLLM = """#!{python}
# Stands in for vLLM's `vllm serve`: records its arguments, then serves the synthetic engine.
import json, os, sys
args = sys.argv[1:]
port = args[args.index("--port") + 1]
with open(os.path.join(os.environ["FAKE_VLLM_RECORD"], port + ".json"), "w") as out:
    json.dump({{"pid": os.getpid(), "args": args}}, out)  # execv keeps the pid
name = args[args.index("--served-model-name") + 1]
command = [{specgate!r}, "engine", "--model", "sim", "--host", "127.0.0.1", "--port", port,
           "--served-model-name", name]
os.execv(command[0], command)
"""


@contextlib.contextmanager
def launched(tmp_path: Path, sqlite_url: str):
    """`specgate routes launch` with a fake `vllm` on PATH and a fake `vllm` package."""
    fake_bin, fake_pkg, record = tmp_path / "bin", tmp_path / "pkg" / "vllm", tmp_path / "record"
    for folder in (fake_bin, fake_pkg, record):
        folder.mkdir(parents=True)
    (fake_pkg / "__init__.py").write_text("")
    script = fake_bin / "vllm"
    script.write_text(FAKE_VLLM.format(python=sys.executable, specgate=specgate_executable()))
    script.chmod(0o755)
    ports = closed_port(), closed_port()
    path = tmp_path / "routes.yaml"
    spec = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3}
    path.write_text(
        yaml.safe_dump(
            {
                "alias": "smol",
                "host": "127.0.0.1",
                "otlp_traces_endpoint": f"http://127.0.0.1:{closed_port()}",
                "baseline": {"name": "base", "model": "some/model", "port": ports[0]},
                "candidate": {
                    "name": "spec",
                    "model": "some/model",
                    "port": ports[1],
                    "speculative_config": spec,
                    "args": ["--max-model-len", "4096"],
                },
            }
        )
    )
    env = {
        **os.environ,
        "PATH": f"{fake_bin}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(fake_pkg.parent),
        "FAKE_VLLM_RECORD": str(record),
        "SPECGATE_HOME": str(tmp_path / "home"),
    }
    out = (tmp_path / "launch.log").open("wb")
    proc = subprocess.Popen(
        [specgate_executable(), "routes", "launch", "-f", str(path), "--ready-timeout", "40s",
         "--database-url", sqlite_url],
        env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        yield proc, ports, record, tmp_path / "launch.log"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        for port in ports:  # the engines run in their own process groups
            with contextlib.suppress(httpx.HTTPError):
                httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=0.5)
        out.close()


def wait_for(log: Path, needle: str, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while needle not in log.read_text():
        assert proc.poll() is None, f"launch exited {proc.returncode}:\n{log.read_text()}"
        assert time.monotonic() < deadline, f"no {needle!r} in {timeout}s:\n{log.read_text()}"
        time.sleep(0.2)


def answers(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_launch_starts_both_servers_registers_them_and_stops_them_on_sigterm(tmp_path, sqlite_url):
    with launched(tmp_path, sqlite_url) as (proc, ports, record, log):
        wait_for(log, "serving; SIGTERM", proc)
        assert all(answers(p) for p in ports)
        base = json.loads((record / f"{ports[0]}.json").read_text())["args"]
        cand = json.loads((record / f"{ports[1]}.json").read_text())["args"]
        assert base[:2] == ["serve", "some/model"] and "--speculative-config" not in base
        assert "--enable-per-request-metrics" in base and "--otlp-traces-endpoint" in base
        assert cand[cand.index("--per-request-spec-decode-metrics") + 1] == "summary"
        assert json.loads(cand[cand.index("--speculative-config") + 1])["prompt_lookup_max"] == 3
        assert cand[-2:] == ["--max-model-len", "4096"]
        engine = make_engine(sqlite_url)
        with session_factory(engine)() as db:
            urls = {r.name: r.base_url for r in db.scalars(select(Route))}
        engine.dispose()
        assert urls == {
            "base": f"http://127.0.0.1:{ports[0]}/v1",
            "spec": f"http://127.0.0.1:{ports[1]}/v1",
        }
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(45) == 0, log.read_text()
        assert not any(answers(p) for p in ports)


def test_launch_stops_the_other_server_when_one_dies(tmp_path, sqlite_url):
    with launched(tmp_path, sqlite_url) as (proc, ports, record, log):
        wait_for(log, "serving; SIGTERM", proc)
        pid = json.loads((record / f"{ports[1]}.json").read_text())["pid"]
        os.kill(pid, signal.SIGKILL)
        assert proc.wait(45) == 1, log.read_text()
        assert "spec exited" in log.read_text()
        assert not answers(ports[0])
