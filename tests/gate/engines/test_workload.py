"""The built-in workload and the JSONL loader."""

from __future__ import annotations

from collections import Counter

import pytest

from gate.engines.base import parse_request
from gate.engines.workload import load_workload, parse_jsonl
from gate.errors import ConfigError
from gate.gateway.inputs import KNOWN, split_inputs

CLASSES = {
    "proofread",
    "text_edit",
    "code_edit",
    "json_extraction",
    "tool_call",
    "rag",
    "chat",
    "creative",
}


def test_builtin_workload_covers_every_class_with_evaluator_inputs():
    items = load_workload()
    assert len(items) >= 80
    counts = Counter(item.segment for item in items)
    assert set(counts) == CLASSES and min(counts.values()) >= 8
    for item in items:
        declared = split_inputs(item.body, {})  # what the gateway does with the body
        assert set(declared.inputs) <= KNOWN
        parse_request(item.engine_body, chat=True, default_max_tokens=64)
        inputs, body = declared.inputs, declared.upstream_body
        if item.segment == "json_extraction":
            assert body["response_format"]["type"] == "json_schema" and inputs["schema"]
        if item.segment == "tool_call":
            assert body["tools"]
        if item.segment == "rag":
            assert inputs["context"] and inputs["reference"]
        if item.segment == "code_edit":
            assert inputs["tests"]
        if item.segment == "creative":
            assert body["temperature"] > 0.7
        else:
            assert body["temperature"] == 0


def test_a_prefix_of_the_workload_spans_all_classes():
    first = load_workload(limit=len(CLASSES))
    assert {item.segment for item in first} == CLASSES
    assert [i.segment for i in load_workload(limit=20, segments=["rag"])] == ["rag"] * 14


def test_any_jsonl_of_openai_bodies_loads(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text(
        '# a comment\n{"messages": [{"role": "user", "content": "hi"}]}\n\n'
        '{"prompt": "Once upon a time", "temperature": 1.0}\n'
    )
    items = load_workload(path)
    assert [(i.segment, i.path) for i in items] == [
        ("chat", "/v1/chat/completions"),
        ("creative", "/v1/completions"),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"messages": [{"role": "user", "content": "x"}]}\n{oops\n', "w:2: invalid JSON"),
        ("[1, 2]\n", "w:1: each line must be a JSON object"),
        ('{"model": "m"}\n', "w:1: a body needs 'messages'"),
        ("\n# nothing\n", "w: no requests"),
    ],
)
def test_bad_workload_lines_are_named(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_jsonl(text, source="w")


def test_replays_of_the_builtin_workload_draw_fresh_seeds():
    import random

    rng = random.Random(3)
    creative = [item for item in load_workload() if item.segment == "creative"]
    fixed = set(range(1000, 1000 + len(creative)))
    assert {item.body["seed"] for item in creative} == fixed
    first = [item.replay_body(rng)["seed"] for item in creative]
    second = [item.replay_body(rng)["seed"] for item in creative]
    assert len(set(first + second)) == 2 * len(creative)  # every replay its own draw
    assert {item.body["seed"] for item in creative} == fixed  # the items are not mutated
    line = '{"messages": [{"role": "user", "content": "hi"}], "temperature": 1, "seed": 5}'
    (own,) = parse_jsonl(line)
    assert own.replay_body(rng)["seed"] == 5  # a user's workload keeps its seeds


def test_a_demo_longer_than_the_workload_replays_it_again_in_turn():
    from gate.demo.run import DemoOptions, _workload

    items = load_workload()
    asked = 2 * len(items) + 5
    got = _workload(DemoOptions(requests=asked))
    assert len(got) == asked, "--requests is honoured past the built-in 86"
    assert len({item.id for item in got}) == asked
    assert [item.body for item in got] == [items[k % len(items)].body for k in range(asked)]
    assert got[len(items)].id == f"{items[0].id}#2"
    assert _workload(DemoOptions(requests=5)) == items[:5]
