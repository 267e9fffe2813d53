"""The route file of `specgate routes launch`: its schema, the `vllm serve` flags of each
server, and the route each server registers as.

A route file (YAML) names the model alias clients ask the gateway for and the two servers:

    alias: llama-8b                    # both servers answer to it (--served-model-name)
    host: 0.0.0.0                      # where the servers bind (default 127.0.0.1)
    advertise_host: gpu-01.internal    # how the gateway reaches them (default: host)
    otlp_traces_endpoint: http://otel-collector:4317
    baseline:
      name: llama-8b-base
      model: meta-llama/Llama-3.1-8B-Instruct
      port: 8000
      env: {CUDA_VISIBLE_DEVICES: "0"}
    candidate:
      name: llama-8b-ngram
      model: meta-llama/Llama-3.1-8B-Instruct
      port: 8001
      env: {CUDA_VISIBLE_DEVICES: "1"}
      speculative_config: {method: ngram, num_speculative_tokens: 4, prompt_lookup_max: 4}

Both servers get `--enable-per-request-metrics` and `--otlp-traces-endpoint`; only the
speculative one gets `--speculative-config` and `--per-request-spec-decode-metrics summary`
(vLLM refuses to start with that flag and no speculative config). The gateway forwards the
client's body as it is, so both servers must answer to the alias; each is served as
`--served-model-name <route name> <alias>`: vLLM answers to either name and labels its
metrics with the first (`model_name`), so dashboards tell the baseline from the candidate.
A route's `url` replaces the derived `http://advertise_host:port/v1` (Compose and
Kubernetes, where each server has its own host name).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gate.db.enums import RouteRole
from gate.errors import BadRequest, InputMalformed
from gate.rollouts.schemas import RouteIn
from gate.stats.policy import summary


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RouteEntry(_Strict):
    """One vLLM server of the route file."""

    name: str = Field(min_length=1, max_length=128)
    model: str = Field(min_length=1, description="What vLLM loads: a hub id or a local path.")
    port: int = Field(ge=1, le=65535)
    url: str | None = Field(None, description="Base URL others reach it at (ends in /v1).")
    speculative_config: dict[str, Any] | None = None
    args: list[str] = Field(default_factory=list, description="Further `vllm serve` flags.")
    env: dict[str, str] = Field(default_factory=dict, description="e.g. CUDA_VISIBLE_DEVICES.")


class RouteFile(_Strict):
    """A baseline and a speculative candidate answering to one alias."""

    alias: str = Field(min_length=1, max_length=256)
    host: str = "127.0.0.1"
    advertise_host: str | None = None
    otlp_traces_endpoint: str | None = None
    baseline: RouteEntry
    candidate: RouteEntry

    @model_validator(mode="after")
    def _check(self) -> RouteFile:
        if self.baseline.speculative_config:
            raise ValueError("the baseline must not have a speculative_config")
        config = self.candidate.speculative_config
        if not config or not isinstance(config.get("method"), str):
            raise ValueError("the candidate needs a speculative_config with a 'method'")
        if self.baseline.name == self.candidate.name:
            raise ValueError("the baseline and the candidate need different names")
        if self.baseline.port == self.candidate.port and not (
            self.baseline.url and self.candidate.url
        ):
            raise ValueError("the baseline and the candidate need different ports")
        return self

    def base_url(self, entry: RouteEntry) -> str:
        """Return where the gateway reaches `entry` (its OpenAI base URL, ending in /v1)."""
        if entry.url:
            return entry.url.rstrip("/")
        host = self.advertise_host or ("127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host)
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"http://{host}:{entry.port}/v1"


def parse_route_file(data: Any, source: str) -> RouteFile:
    """Validate a route file's parsed YAML; an invalid one is `InputMalformed`."""
    try:
        return RouteFile.model_validate(data)
    except ValidationError as exc:
        raise InputMalformed(f"route file {source}: {summary(exc)}") from None


def vllm_args(routes: RouteFile, role: RouteRole, otlp_endpoint: str | None) -> list[str]:
    """Return the `vllm serve` arguments of one route (everything after `vllm`)."""
    entry = routes.candidate if role is RouteRole.CANDIDATE else routes.baseline
    args = ["serve", entry.model, "--host", routes.host, "--port", str(entry.port)]
    # The route's own name first: vLLM labels its metrics with the first served name.
    args += ["--served-model-name", entry.name, routes.alias, "--enable-per-request-metrics"]
    if otlp_endpoint:
        args += ["--otlp-traces-endpoint", otlp_endpoint]
    if entry.speculative_config:
        spec = json.dumps(entry.speculative_config, separators=(",", ":"), sort_keys=True)
        args += ["--speculative-config", spec, "--per-request-spec-decode-metrics", "summary"]
    return args + list(entry.args)


def route_in(routes: RouteFile, role: RouteRole, api_key: str | None = None) -> RouteIn:
    """Return the route to register for one server of the file (with `api_key`, a
    credential source, as its bearer token)."""
    entry = routes.candidate if role is RouteRole.CANDIDATE else routes.baseline
    base = routes.base_url(entry)
    config = dict(entry.speculative_config or {})
    tokens = config.get("num_speculative_tokens")
    draft = config.get("model")
    try:
        return RouteIn.model_validate(
            {
                "name": entry.name,
                "base_url": base,
                "model": routes.alias,
                "role": role,
                "metrics_url": api_root(base) + "/metrics",
                "spec_method": config.get("method"),
                "spec_tokens": tokens if isinstance(tokens, int) else None,
                "draft_model": draft if isinstance(draft, str) else None,
                "spec_config": config,
                "auth": {"source": api_key} if api_key else None,
            }
        )
    except ValidationError as exc:
        raise BadRequest(f"route {entry.name}: {exc}") from None


def api_root(base_url: str) -> str:
    """Return a server's root: its OpenAI base URL without the trailing /v1."""
    base = base_url.rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base
