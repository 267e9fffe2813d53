"""deploy/compose: the file parses and validates against the Compose schema, every specgate
service runs a real command with real options and real settings, the vLLM services carry the
flags `specgate routes launch` passes, and the pieces (Prometheus targets, Grafana
datasources, the OpenTelemetry Collector, the Postgres init script) fit together."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ProgrammingError

from gate.cli.routes_launch import load_route_file
from gate.db import migrate
from gate.db.enums import RouteRole
from gate.launch.route_file import vllm_args
from gate.settings import CollectorSettings, Settings
from tests.conftest import create_database, drop_database
from tests.deploy import compose
from tests.deploy.tools import HEARTBEATS, assert_cli_command, assert_heartbeat_check, run, tool

EXAMPLE_ENV = compose.COMPOSE_DIR / ".env.example"
PROMETHEUS = compose.ROOT / "deploy" / "prometheus" / "prometheus.yml"
GRAFANA = compose.ROOT / "deploy" / "grafana"
OTEL = compose.COMPOSE_DIR / "otel-collector.yaml"
SETTINGS = {f"SPECGATE_{name.upper()}" for name in Settings.model_fields} | {
    f"SPECGATE_{name.upper()}" for name in CollectorSettings.model_fields
}


def example_variables() -> dict[str, str]:
    """.env.example with every REQUIRED value filled in, as a user would."""
    out: dict[str, str] = {}
    for line in EXAMPLE_ENV.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip() or f"filled-{key.strip().lower()}"
    return out


@pytest.fixture(scope="module")
def services():
    return compose.load(example_variables())["services"]


def specgate_services(services):
    return {n: s for n, s in services.items() if compose.is_specgate(s)}


def test_the_compose_file_matches_the_compose_specification():
    validator = tool("check-jsonschema")
    result = run(validator, "--builtin-schema", "vendor.compose-spec", str(compose.COMPOSE_FILE))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_schema_check_catches_a_mistake(tmp_path):
    validator = tool("check-jsonschema")
    broken = compose.load_raw()
    broken["services"]["gateway"]["restart"] = {"policy": "always"}
    path = tmp_path / "compose.yaml"
    path.write_text(yaml.safe_dump(broken))
    result = run(validator, "--builtin-schema", "vendor.compose-spec", str(path))
    assert result.returncode == 1 and "restart" in result.stdout


def test_the_stack_has_every_service_of_the_issue():
    services = compose.load_raw()["services"]
    expected = {
        "postgres", "redis", "migrate", "gateway", "collector", "worker", "beat",
        "otel-collector", "prometheus", "grafana", "vllm-baseline", "vllm-candidate",
        "engine-baseline", "engine-candidate",
    }  # fmt: skip
    assert expected <= set(services)
    gpu = {n for n, s in services.items() if s.get("profiles") == ["gpu"]}
    cpu = {n for n, s in services.items() if s.get("profiles") == ["cpu"]}
    assert {"vllm-baseline", "vllm-candidate"} <= gpu and not gpu & cpu
    assert {"engine-baseline", "engine-candidate"} <= cpu


def test_required_secrets_must_be_set_and_every_variable_is_documented():
    with pytest.raises(compose.MissingVariable, match="POSTGRES_PASSWORD"):
        compose.load({})
    used = set(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)", compose.COMPOSE_FILE.read_text()))
    assert used <= set(example_variables()), used - set(example_variables())


def test_every_specgate_service_runs_a_real_command_with_real_options(services):
    for name, service in specgate_services(services).items():
        assert service.get("command"), f"{name} has no command"
        assert_cli_command(service["command"], f"compose service {name}")


def test_specgate_services_set_only_real_settings(services):
    for name, service in specgate_services(services).items():
        env = service.get("environment") or {}
        unknown = {k for k in env if k.startswith("SPECGATE_")} - SETTINGS
        assert not unknown, f"{name} sets {unknown}, which no settings class reads"


def test_the_services_of_the_data_path_have_what_they_need(services):
    for name in ("migrate", "gateway", "collector", "worker", "beat"):
        env = services[name]["environment"]
        assert env["SPECGATE_DATABASE_URL"].startswith("postgresql+psycopg://specgate:")
        assert env["SPECGATE_REDIS_URL"].startswith("redis://redis:6379/")
    assert services["gateway"]["environment"]["SPECGATE_OTLP_ENDPOINT"] == "http://collector:4318"
    for name in ("gateway", "collector", "worker", "beat"):
        dependency = services[name]["depends_on"]["migrate"]
        assert dependency == {"condition": "service_completed_successfully"}, name
    assert services["beat"]["command"][:2] == ["worker", "--beat"]
    assert "--beat" not in services["worker"]["command"]


def test_health_checks_probe_each_service_s_own_port(services):
    for name, service in specgate_services(services).items():
        port = compose.listen_port(service["command"])
        url = (service.get("environment") or {}).get("HEALTHCHECK_URL")
        if name in HEARTBEATS:  # no HTTP: the heartbeat check instead of the image's
            assert_heartbeat_check(service["healthcheck"]["test"][1:], HEARTBEATS[name])
        elif port is None:  # no HTTP: the image's check (the gateway's URL) must be off
            assert service["healthcheck"] == {"disable": True}, name
        else:
            assert url and url.startswith(f"http://127.0.0.1:{port}/"), name
            assert "healthcheck" not in service, f"{name}: the image's HEALTHCHECK reads the URL"
    health = {"gateway": "/healthz", "collector": "/healthz", "engine-baseline": "/health"}
    for name, path in health.items():
        assert services[name]["environment"]["HEALTHCHECK_URL"].endswith(path)


def test_the_console_script_named_by_the_image_runs():
    result = subprocess.run(
        [compose.specgate_executable(), "--help"], capture_output=True, timeout=60
    )
    assert result.returncode == 0, result.stderr


def test_the_vllm_services_carry_the_flags_routes_launch_passes(services):
    routes = load_route_file(compose.COMPOSE_DIR / "routes" / "gpu.yaml")
    for name, role in (
        ("vllm-baseline", RouteRole.BASELINE),
        ("vllm-candidate", RouteRole.CANDIDATE),
    ):
        service = services[name]
        assert service["entrypoint"] == ["vllm"]
        assert service["command"] == vllm_args(routes, role, routes.otlp_traces_endpoint), name
    baseline, candidate = (
        services["vllm-baseline"]["command"],
        services["vllm-candidate"]["command"],
    )
    for flags in (baseline, candidate):
        assert "--enable-per-request-metrics" in flags and "--otlp-traces-endpoint" in flags
    assert "--speculative-config" not in baseline
    assert "--per-request-spec-decode-metrics" not in baseline
    at = candidate.index("--per-request-spec-decode-metrics")
    assert candidate[at + 1] == "summary"
    config = json.loads(candidate[candidate.index("--speculative-config") + 1])
    assert config["method"] == "ngram" and config["num_speculative_tokens"] >= 1


def test_the_compose_file_shows_ngram_draft_model_and_eagle3():
    raw = compose.COMPOSE_FILE.read_text()
    for method in ('"method":"ngram"', '"method":"draft_model"', '"method":"eagle3"'):
        assert method in raw


def test_the_registration_jobs_point_at_the_engines_they_wait_for(services):
    for job, profile in (("register-gpu", "gpu"), ("register-cpu", "cpu")):
        service = services[job]
        assert service["profiles"] == [profile]
        assert service["command"][:3] == ["routes", "launch", "--no-start"]
        source = service["volumes"][0].split(":")[0]
        routes = load_route_file(compose.COMPOSE_DIR / source)
        answering = {
            f"{host}:{compose.listen_port(s['command'])}"
            for n, s in services.items()
            if compose.in_profile(s, profile) and s.get("command")
            for host in compose.network_names(n, s)
        }
        for entry in (routes.baseline, routes.candidate):
            assert entry.url and entry.url.split("//")[1].split("/")[0] in answering, entry.url
        assert set(service["depends_on"]) - {"migrate"} == {
            n for n, s in services.items() if s.get("profiles") == [profile] and n != job
        }


def test_prometheus_scrapes_services_of_both_profiles(services):
    config = yaml.safe_load(PROMETHEUS.read_text())
    targets = {
        t for job in config["scrape_configs"] for c in job["static_configs"] for t in c["targets"]
    }
    for profile in ("gpu", "cpu"):
        answering = set()
        for name, service in services.items():
            if not compose.in_profile(service, profile):
                continue
            port = compose.listen_port(service.get("command") or [])
            if port is None and service.get("entrypoint") == ["vllm"]:
                port = compose.listen_port(service["command"])
            for host in compose.network_names(name, service):
                answering.add(f"{host}:{port}")
        assert targets <= answering, (profile, targets - answering)
    mounts = services["prometheus"]["volumes"]
    assert "../prometheus:/etc/prometheus:ro" in mounts
    assert "--config.file=/etc/prometheus/prometheus.yml" in services["prometheus"]["command"]


def test_grafana_gets_every_variable_its_provisioning_reads(services):
    datasources = (GRAFANA / "provisioning" / "datasources" / "specgate.yaml").read_text()
    wanted = set(re.findall(r"\$\{(\w+)\}", datasources))
    assert wanted <= set(services["grafana"]["environment"])
    provider = yaml.safe_load(
        (GRAFANA / "provisioning" / "dashboards" / "specgate.yaml").read_text()
    )
    path = provider["providers"][0]["options"]["path"]
    assert f"../grafana/dashboards:{path}:ro" in services["grafana"]["volumes"]
    assert (
        services["grafana"]["environment"]["SPECGATE_PG_READER"]
        == (services["postgres"]["environment"]["GRAFANA_DB_USER"])
    )


def test_the_otel_collector_forwards_to_the_specgate_collector(services):
    config = yaml.safe_load(OTEL.read_text())
    pipeline = config["service"]["pipelines"]["traces"]
    assert set(pipeline["receivers"]) <= set(config["receivers"])
    assert set(pipeline["processors"]) <= set(config["processors"])
    assert set(pipeline["exporters"]) <= set(config["exporters"])
    (exporter,) = pipeline["exporters"]
    port = compose.listen_port(services["collector"]["command"])
    assert config["exporters"][exporter]["traces_endpoint"] == f"http://collector:{port}/v1/traces"
    grpc = config["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"]
    for name in ("vllm-baseline", "vllm-candidate"):
        command = services[name]["command"]
        endpoint = command[command.index("--otlp-traces-endpoint") + 1]
        assert endpoint == f"http://otel-collector:{grpc.rsplit(':', 1)[1]}"
    mount = services["otel-collector"]["volumes"][0]
    assert mount.startswith("./otel-collector.yaml:") and mount.split(":")[1] in " ".join(
        services["otel-collector"]["command"]
    )


@pytest.mark.postgres
def test_the_postgres_init_script_makes_a_read_only_role(pg_server):
    psql = shutil.which("psql")
    if psql is None:
        pytest.skip(reason="psql is not installed")
    url = create_database(pg_server, prefix="specgate_grafana")
    reader = f"grafana_reader_{os.getpid()}"
    admin = make_url(url)
    try:
        env = {
            **os.environ,
            "POSTGRES_USER": admin.username or "postgres",
            "POSTGRES_DB": admin.database or "",
            "GRAFANA_DB_USER": reader,
            "GRAFANA_DB_PASSWORD": "reader-pw",
            "PGHOST": admin.host or "127.0.0.1",
            "PGPORT": str(admin.port or 5432),
        }
        script = compose.COMPOSE_DIR / "postgres-init" / "10-grafana-reader.sh"
        done = subprocess.run(
            ["sh", str(script)], env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        migrate.upgrade(url)  # tables made after the script are readable too
        as_reader = admin.set(username=reader, password="reader-pw")
        engine = create_engine(as_reader)
        try:
            with engine.connect() as connection:
                assert connection.execute(text("SELECT count(*) FROM rollouts")).scalar() == 0
                with pytest.raises(ProgrammingError, match="permission denied"):
                    connection.execute(text("DELETE FROM rollouts"))
        finally:
            engine.dispose()
    finally:
        drop_database(pg_server, url)
        with pg_server.connect() as connection:
            connection.execute(text(f'DROP ROLE IF EXISTS "{reader}"'))


def test_paths_mounted_from_the_repository_exist(services):
    for name, service in services.items():
        for volume in service.get("volumes") or []:
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (compose.COMPOSE_DIR / source).exists(), f"{name}: {source}"
    assert Path(compose.COMPOSE_DIR / "../../Dockerfile").resolve().is_file()
