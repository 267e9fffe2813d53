"""The engines' weights: the shipped Q4_1, or a Q8_0 copy made once and cached."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import gguf as gguf_lib
import numpy as np
import pytest
from gguf.quants import dequantize

from gate.engines.local import build_backend
from gate.engines.model import MODEL_PACKAGE
from gate.engines.weights import ENCODER, default_encoding, weights_path
from gate.errors import ConfigError


def tensors(path: Path) -> dict[str, object]:
    return {tensor.name: tensor for tensor in gguf_lib.GGUFReader(path).tensors}


def values(tensor: object) -> np.ndarray:
    return dequantize(tensor.data, tensor.tensor_type)  # type: ignore[attr-defined]


def test_q4_1_is_the_shipped_file(gguf: Path, tmp_path: Path):
    assert weights_path("q4_1", cache_dir=tmp_path) == gguf
    assert list(tmp_path.iterdir()) == []


def test_q8_0_copy_is_made_once_and_keeps_the_model(gguf: Path, tmp_path: Path):
    said: list[str] = []
    name = f"SmolLM2-135M-Instruct.{metadata.version(MODEL_PACKAGE)}.Q8_0.{ENCODER}.gguf"
    killed = tmp_path / f"{name}.999999.partial"
    killed.write_bytes(b"half a file from an encoder that was killed")
    copy = weights_path("q8_0", cache_dir=tmp_path, announce=said.append)
    assert copy == tmp_path / name
    assert len(said) == 1 and str(copy) in said[0]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".partial")]

    source, encoded = tensors(gguf), tensors(copy)
    assert encoded.keys() == source.keys()
    fields = gguf_fields(gguf)
    assert gguf_fields(copy) == fields  # tokenizer, chat template, hyper-parameters
    matrices = [name for name, t in encoded.items() if len(t.shape) == 2]  # type: ignore[attr-defined]
    assert matrices
    for name in matrices:
        assert encoded[name].tensor_type == gguf_lib.GGMLQuantizationType.Q8_0  # type: ignore[attr-defined]
    # The shipped embedding is Q8_0 already: it comes through unchanged.
    embedding = "token_embd.weight"
    assert np.array_equal(values(source[embedding]), values(encoded[embedding]))
    layer = "blk.0.ffn_down.weight"  # a Q4_1 matrix
    original, requantised = values(source[layer]), values(encoded[layer])
    # Q8_0 rounds each value to a step of 1/127 of its block's largest magnitude: half a
    # step at most, plus the rounding of the step itself to float16 (~6 % more here).
    step = np.abs(original).reshape(-1, 32).max(axis=1, keepdims=True) / 127
    error = np.abs(original - requantised).reshape(-1, 32)
    assert np.all(error <= 0.6 * step)
    assert 0 < error.mean() < np.abs(original).mean() / 100

    again: list[str] = []
    mtime = copy.stat().st_mtime_ns
    assert weights_path("q8_0", cache_dir=tmp_path, announce=again.append) == copy
    assert again == [] and copy.stat().st_mtime_ns == mtime


def gguf_fields(path: Path) -> dict[str, object]:
    reader = gguf_lib.GGUFReader(path)
    skip = ("GGUF.", "general.alignment")
    return {
        name: repr(field.contents())
        for name, field in reader.fields.items()
        if not name.startswith(skip)
    }


def test_unknown_encoding_is_refused(tmp_path: Path):
    with pytest.raises(ConfigError, match="--weights must be one of q8_0, q4_1"):
        weights_path("q2_k", cache_dir=tmp_path)


def test_unwritable_cache_says_how_to_move_it(tmp_path: Path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match="SPECGATE_MODEL_CACHE"):
        weights_path("q8_0", cache_dir=blocker / "models")


def test_a_file_and_an_encoding_together_are_refused(gguf: Path):
    with pytest.raises(ConfigError, match="not both"):
        build_backend("llamacpp", spec=None, gguf=gguf, weights="q8_0")


def test_each_backend_has_its_default():
    assert default_encoding("llamacpp") == "q8_0"
    assert default_encoding("transformers") == "q4_1"
