"""`specgate engine`: serve a model behind an OpenAI-compatible API."""

from __future__ import annotations

from typing import Annotated

import typer
import uvicorn

from gate.engines.sim import SimProfile, create_sim_app
from gate.errors import ConfigError

FAILURES = ("none", "status500", "hang", "garbage", "broken_stream")


def engine(
    model: Annotated[str, typer.Option(help="'sim' for the synthetic engine.")] = "sim",
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to bind.")] = 8001,
    ttft_ms: Annotated[float, typer.Option(help="sim: time to first token.")] = 20.0,
    tokens: Annotated[int, typer.Option(help="sim: output tokens (chunks) per answer.")] = 32,
    token_interval_ms: Annotated[float, typer.Option(help="sim: gap between tokens.")] = 0.0,
    num_speculative_tokens: Annotated[int, typer.Option(help="sim: draft tokens per step.")] = 0,
    acceptance: Annotated[float, typer.Option(help="sim: per-token acceptance rate.")] = 0.0,
    failure: Annotated[str, typer.Option(help=f"sim: one of {', '.join(FAILURES)}.")] = "none",
) -> None:
    """Serve a local engine. Only the synthetic engine (`--model sim`) is built so far."""
    if model != "sim":
        raise ConfigError(
            f"model {model!r}: only the synthetic engine (--model sim) is built yet; "
            "the SmolLM2 llama.cpp and transformers backends arrive with the local-engines work"
        )
    if failure not in FAILURES:
        raise ConfigError(f"--failure must be one of {', '.join(FAILURES)}")
    profile = SimProfile(
        ttft_s=ttft_ms / 1000,
        tokens=tokens,
        token_interval_s=token_interval_ms / 1000,
        spec_tokens=num_speculative_tokens,
        acceptance=acceptance,
        failure=failure,  # type: ignore[arg-type]
    )
    typer.echo(f"specgate engine (sim) on http://{host}:{port}/v1")
    uvicorn.run(
        create_sim_app(profile), host=host, port=port, log_level="warning", access_log=False
    )
