"""Replay workloads: the built-in one authored for specgate, or any JSONL of OpenAI bodies.

The built-in workload (86 requests) spans eight prompt classes, named in each body's
`specgate.segment`: proofread and text_edit (a given text to correct or edit: mostly
copying), code_edit (with tests), json_extraction (with a `json_schema` response format),
tool_call (with tool definitions), rag (documents and a reference answer), chat, and
creative (temperature 0.9, seeded: seeds 1000-1009 keep engine benchmarks reproducible,
and a replay through the gateway draws fresh ones, `replay_body`). Evaluator inputs ride
in the `specgate` field, which the gateway strips before the engines see the body. The
copy-heavy classes give n-gram speculation text to copy; creative writing gives it none.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

import orjson

from gate.errors import ConfigError
from gate.request.fields import BODY_FIELD
from gate.request.segments import classify

BUILTIN = "workload.jsonl"
CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"


@dataclass(frozen=True)
class WorkloadItem:
    """One request to replay: its id, prompt class, API path and OpenAI body."""

    id: str
    segment: str
    path: str
    body: dict[str, Any]
    # The built-in workload chose its seeds itself, so a replay may change them.
    owns_seed: bool = False

    def replay_body(self, rng: random.Random) -> dict[str, Any]:
        """Return the body with a seed the workload owns drawn afresh for this replay.

        A fixed seed makes every replay of a sampled prompt the same draw, so the
        sampled-parity test would compare one fixed answer per prompt and side; a fresh seed
        per replay makes each side an independent draw from its route's distribution.
        """
        if not self.owns_seed or "seed" not in self.body:
            return self.body
        return {**self.body, "seed": rng.randrange(2**31)}

    @property
    def engine_body(self) -> dict[str, Any]:
        """Return the body without the evaluator inputs, as an engine would receive it."""
        return {key: value for key, value in self.body.items() if key != BODY_FIELD}


def builtin_text() -> str:
    """Return the built-in workload file's text (shipped as package data)."""
    return resources.files("gate.engines").joinpath("data", BUILTIN).read_text("utf-8")


def load_workload(
    path: Path | None = None, *, limit: int | None = None, segments: Iterable[str] = ()
) -> list[WorkloadItem]:
    """Load a JSONL workload (the built-in one by default), interleaved across segments."""
    # Interleaving makes any prefix (`limit`) cover every prompt class in turn.
    if path is None:
        items = [replace(i, owns_seed=True) for i in parse_jsonl(builtin_text(), source=BUILTIN)]
    else:
        try:
            items = parse_jsonl(path.read_text("utf-8"), source=str(path))
        except OSError as exc:
            raise ConfigError(f"cannot read workload {path}: {exc.strerror}") from None
    wanted = set(segments)
    if wanted:
        items = [item for item in items if item.segment in wanted]
    mixed = interleave(items)
    return mixed if limit is None else mixed[: max(0, limit)]


def cycled(items: list[WorkloadItem], n: int) -> list[WorkloadItem]:
    """Return `n` items, going through `items` again as often as needed (a repeat's id
    gains `#2`, `#3`, ...), so that a replay may be longer than its workload."""
    if not items:
        return []
    out = list(items[:n])
    for k in range(len(items), n):
        item = items[k % len(items)]
        out.append(replace(item, id=f"{item.id}#{k // len(items) + 1}"))
    return out


def parse_jsonl(text: str, *, source: str = "workload") -> list[WorkloadItem]:
    """Parse JSONL of OpenAI chat or completion bodies; blank and `#` lines are skipped."""
    items: list[WorkloadItem] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            body = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise ConfigError(f"{source}:{number}: invalid JSON ({exc})") from None
        items.append(_item(body, f"{source}:{number}", len(items)))
    if not items:
        raise ConfigError(f"{source}: no requests")
    return items


def _item(body: Any, where: str, index: int) -> WorkloadItem:
    if not isinstance(body, dict):
        raise ConfigError(f"{where}: each line must be a JSON object (an OpenAI request body)")
    if isinstance(body.get("messages"), list) and body["messages"]:
        path = CHAT_PATH
    elif isinstance(body.get("prompt"), str):
        path = COMPLETIONS_PATH
    else:
        raise ConfigError(f"{where}: a body needs 'messages' (chat) or 'prompt' (completions)")
    declared = body.get(BODY_FIELD)
    inputs = declared if isinstance(declared, dict) else {}
    segment = inputs.get("segment")
    if not isinstance(segment, str) or not segment:
        segment = classify(body, inputs)
    return WorkloadItem(f"{segment}-{index + 1:03d}", segment, path, body)


def interleave(items: list[WorkloadItem]) -> list[WorkloadItem]:
    """Round-robin the items across segments, keeping each segment's own order."""
    groups: dict[str, list[WorkloadItem]] = defaultdict(list)
    for item in items:
        groups[item.segment].append(item)
    queues = list(groups.values())
    mixed: list[WorkloadItem] = []
    for rank in range(max((len(q) for q in queues), default=0)):
        mixed.extend(q[rank] for q in queues if rank < len(q))
    return mixed
