"""The HaluEval loader drops reserved lines before parsing and splits dev/val reproducibly."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[2] / "bench"))
from halueval_rows import conversation, load_split, reserved_lines


def test_reserved_lines_are_never_parsed_and_the_split_is_fixed(tmp_path: Path):
    lines = [
        json.dumps({"document": f"doc {i}", "right_summary": "r", "hallucinated_summary": "h"})
        for i in range(20)
    ]
    lines[3] = lines[7] = "not json: reserved rows must not even be parsed"
    (tmp_path / "dataset_halueval_summarization.jsonl").write_text("\n".join(lines))
    (tmp_path / "reserved.txt").write_text("# reserved\n3\n7\n")
    reserved = reserved_lines(tmp_path / "reserved.txt")
    dev, val = load_split(tmp_path, "summarization", reserved)
    seen = {r.line for r in dev} | {r.line for r in val}
    assert seen == set(range(20)) - {3, 7}
    assert not {r.line for r in dev} & {r.line for r in val}
    assert [r.line for r in dev] == [
        r.line for r in load_split(tmp_path, "summarization", reserved)[0]
    ]
    assert {r.label for r in dev} == {0, 1}


def test_dialogue_history_becomes_chat_turns():
    turns = conversation("[Human]: Hi there [Assistant]: Hello! [Human]: Seen Zodiac? ")
    assert [t["role"] for t in turns] == ["user", "assistant", "user"]
    assert turns[-1]["content"] == "Seen Zodiac?"
