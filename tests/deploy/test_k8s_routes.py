"""deploy/k8s/routes: the vLLM route Deployments validate against the Kubernetes schema,
request a GPU each, carry exactly the flags `specgate routes launch --dry-run` prints for
their route file, and are reached where that file registers them."""

from __future__ import annotations

import shlex
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from typer.testing import CliRunner

from gate.cli import app
from tests.deploy.test_k8s import K8S, VERSION, by_kind, newest_version, render, validator
from tests.deploy.tools import assert_cli_command

ROUTES = K8S / "routes"
ROUTE_FILE = ROUTES / "routes.yaml"


@pytest.fixture(scope="module")
def docs() -> list[dict[str, Any]]:
    return render(ROUTES)


def dry_run() -> dict[str, list[str]]:
    """What `routes launch --dry-run` prints, by route name: the `vllm` command's arguments."""
    result = CliRunner().invoke(app, ["routes", "launch", "-f", str(ROUTE_FILE), "--dry-run"])
    assert result.exit_code == 0, result.output
    routes = yaml.safe_load(ROUTE_FILE.read_text())
    names = [routes["baseline"]["name"], routes["candidate"]["name"]]
    commands = [shlex.split(line) for line in result.stdout.splitlines()]
    return {name: command[1:] for name, command in zip(names, commands, strict=True)}


def test_every_manifest_passes_the_schema(docs):
    kv = validator()
    assert {d["kind"] for d in docs} == {"Deployment", "Service", "Job", "ConfigMap"}
    for version in (VERSION, newest_version(kv)):
        for doc in docs:
            try:
                kv.validate(doc, version, strict=True)
            except kv.ValidationError as exc:
                pytest.fail(f"{doc['kind']}/{doc['metadata']['name']} ({version}): {exc}")


def test_the_deployments_carry_the_flags_routes_launch_prints(docs):
    expected = dry_run()
    deployments = by_kind(docs, "Deployment")
    assert deployments.keys() == expected.keys()
    for name, args in expected.items():
        (container,) = deployments[name]["spec"]["template"]["spec"]["containers"]
        assert container["command"] == ["vllm"], name
        assert container["args"] == args, name
    candidate = expected[yaml.safe_load(ROUTE_FILE.read_text())["candidate"]["name"]]
    assert "--speculative-config" in candidate


def test_each_server_gets_one_gpu(docs):
    for name, deployment in by_kind(docs, "Deployment").items():
        spec = deployment["spec"]
        (container,) = spec["template"]["spec"]["containers"]
        resources = container["resources"]
        assert resources["limits"]["nvidia.com/gpu"] == 1, name
        assert resources["requests"]["nvidia.com/gpu"] == 1, name
        assert spec["replicas"] == 1 and spec["strategy"]["type"] == "Recreate", name
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            assert container[probe]["httpGet"]["path"] == "/health", name


def test_the_services_are_where_the_route_file_registers_the_servers(docs):
    routes = yaml.safe_load(ROUTE_FILE.read_text())
    services = by_kind(docs, "Service")
    deployments = by_kind(docs, "Deployment")
    for role in ("baseline", "candidate"):
        entry = routes[role]
        url = urlsplit(entry["url"])
        service = services[url.hostname]
        assert service["spec"]["ports"][0]["port"] == url.port
        pod = deployments[entry["name"]]["spec"]["template"]
        assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
        (container,) = pod["spec"]["containers"]
        assert container["ports"][0]["containerPort"] == entry["port"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] == "http/protobuf"
    assert urlsplit(routes["otlp_traces_endpoint"]).path == "/v1/traces"


def test_the_job_registers_the_route_file_the_deployments_follow(docs):
    (job,) = by_kind(docs, "Job").values()
    (container,) = job["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    assert_cli_command(args, "register-routes Job")
    assert args[:3] == ["routes", "launch", "--no-start"]
    path = args[args.index("--route-file") + 1]
    (mount,) = [m for m in container["volumeMounts"] if path.startswith(m["mountPath"] + "/")]
    (volume,) = [
        v for v in job["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"]
    ]
    config = by_kind(docs, "ConfigMap")[volume["configMap"]["name"]]
    assert config["data"][path.rsplit("/", 1)[1]] == ROUTE_FILE.read_text()
