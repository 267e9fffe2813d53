"""The live dashboard's vLLM panels tell the baseline from the candidate: every panel query
runs in Prometheus' own engine (`promtool test rules`) over the expositions two vLLM-format
servers, started with the flags `routes launch` passes, give at each scrape."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families

from gate.cli.routes_launch import load_route_file
from gate.db.enums import RouteRole
from gate.engines.metrics import EngineMetrics, Finished
from gate.engines.spec import SpecStats
from gate.launch.route_file import vllm_args
from tests.deploy.compose import COMPOSE_DIR
from tests.deploy.test_grafana import GRAFANA, load, panels
from tests.deploy.test_prometheus import promtool

LIVE = GRAFANA / "dashboards" / "specgate-live.json"
ROUTES = COMPOSE_DIR / "routes" / "gpu.yaml"
SCRAPES, INTERVAL_S = 12, 15
# Grafana's substitutions: every route selected, the rate window of a 15 s scrape.
GRAFANA_VARIABLES = {"$model": ".*", "$__rate_interval": "1m"}


def served_name(args: list[str]) -> str:
    """The `model_name` label vLLM gives its metrics: the first `--served-model-name`."""
    return args[args.index("--served-model-name") + 1]


class Server:
    """A vLLM-format /metrics of one route, fed with requests between scrapes."""

    def __init__(self, args: list[str], k: int) -> None:
        self.name = served_name(args)
        # The engine exports vLLM's KV-cache gauge itself, read from this at each scrape.
        self.cache = 0.0
        self.metrics = EngineMetrics(self.name, spec_tokens=k, cache_usage=lambda: self.cache)
        self.k = k

    def serve(self, i: int) -> None:
        ttft = 0.05 if self.k else 0.08
        spec = None
        if self.k:
            spec = SpecStats(self.k, num_spec_steps=10, num_draft_tokens=10 * self.k)
            spec.num_accepted_draft_tokens = 5 * self.k
            spec.accepted_per_pos = [10 - p for p in range(self.k)]
        self.metrics.observe(Finished("stop", 100, 64, 1.0 + i / 100, 0.01, ttft, spec))
        self.metrics.running.set(2 + i % 3)
        self.cache = 0.3

    def scrape(self) -> dict[str, float]:
        text = self.metrics.render().decode()
        out = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = {**sample.labels, "job": "vllm", "instance": f"{self.name}:8000"}
                body = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
                out[f"{sample.name}{{{body}}}"] = sample.value
        return out


def scraped_series(servers: list[Server]) -> list[dict[str, str]]:
    """Every series both servers exposed, with its value at each scrape."""
    history: dict[str, list[float]] = {}
    for i in range(SCRAPES):
        for server in servers:
            server.serve(i)
            for series, value in server.scrape().items():
                history.setdefault(series, []).append(value)
    return [{"series": s, "values": " ".join(map(repr, v))} for s, v in history.items()]


def vllm_queries() -> list[tuple[str, str]]:
    dashboard = load(LIVE)
    out = []
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            if "vllm:" in target.get("expr", ""):
                out.append((panel["title"], target["expr"]))
    for var in dashboard["templating"]["list"]:
        query = var.get("query", {})
        if isinstance(query, dict) and "vllm:" in query.get("query", ""):
            # label_values(metric, label) lists the label's values: group by it.
            metric, label = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", query["query"]).groups()
            out.append((f"variable {var['name']}", f"group by ({label}) ({metric})"))
    return out


def expand(expr: str) -> str:
    for name, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(name, value)
    return expr


def run_queries(tmp_path: Path, servers: list[Server]) -> int:
    """Run each dashboard query; fail unless its result holds one series group per route
    (model_name), the candidate's only for speculative counters. Return how many ran."""
    queries = vllm_queries()
    candidate = servers[1].name
    cases = []
    for _, expr in queries:
        # The speculative counters exist on the candidate only, as on a real vLLM.
        names = [candidate] if "spec_decode" in expr else [s.name for s in servers]
        cases.append(
            {
                "expr": f"group by (model_name) ({expand(expr)})",
                "eval_time": f"{(SCRAPES - 1) * INTERVAL_S}s",
                "exp_samples": [{"labels": f'{{model_name="{n}"}}', "value": 1} for n in names],
            }
        )
    test = {
        "rule_files": [],
        "evaluation_interval": f"{INTERVAL_S}s",
        "tests": [
            {
                "interval": f"{INTERVAL_S}s",
                "input_series": scraped_series(servers),
                "promql_expr_test": cases,
            }
        ],
    }
    path = tmp_path / "live.test.yml"
    path.write_text(yaml.safe_dump(test))
    result = subprocess.run(
        [promtool(), "test", "rules", str(path)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return len(cases)


def test_the_live_vllm_panels_separate_baseline_and_candidate(tmp_path):
    routes = load_route_file(ROUTES)
    k = routes.candidate.speculative_config["num_speculative_tokens"]
    servers = [
        Server(vllm_args(routes, RouteRole.BASELINE, None), 0),
        Server(vllm_args(routes, RouteRole.CANDIDATE, None), k),
    ]
    assert [s.name for s in servers] == [routes.baseline.name, routes.candidate.name]
    assert run_queries(tmp_path, servers) >= 10
