"""What a rehearsal replays: the built-in workload, a JSONL of OpenAI bodies, or the
records of `specgate pairs export --with-requests`.

A pairs-export record carries the request the gateway kept for evaluation; when the
gateway had to cut its body (`truncated` names "body"), the prompt is incomplete and
replaying it would measure a different request, so it is counted and skipped.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import orjson

from gate.engines import workload as builtin
from gate.engines.workload import CHAT_PATH, COMPLETIONS_PATH, WorkloadItem
from gate.errors import ConfigError


@dataclass(frozen=True)
class Workload:
    """The requests to replay and what was left out, with the reason."""

    items: list[WorkloadItem]
    source: str
    cut: int = 0  # prompts the gateway truncated
    without_body: int = 0  # pairs-export records with no request kept


def load(
    path: Path | None,
    *,
    segments: dict[str, str] | None = None,
    max_tokens: int | None = None,
) -> Workload:
    """Load and filter a workload; `segments` maps prompt classes to reported segments."""
    if path is None:
        found = Workload(builtin.load_workload(), source="built-in")
    else:
        try:
            text = path.read_text("utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read workload {path}: {exc.strerror}") from None
        found = parse(text, source=str(path))
    items = found.items
    if segments:
        items = [replace(i, segment=segments[i.segment]) for i in items if i.segment in segments]
    if max_tokens is not None:
        items = [replace(i, body={**i.body, "max_tokens": max_tokens}) for i in items]
    if not items:
        raise ConfigError(f"workload {found.source} has no request to replay{_why(found)}")
    return replace(found, items=builtin.interleave(items))


def parse(text: str, *, source: str) -> Workload:
    """Parse JSONL lines of OpenAI bodies or pairs-export records."""
    # Lines keep their numbers (others blanked) so errors point at the file's own line.
    bodies: list[str] = []
    cut = without_body = 0
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            bodies.append("")
            continue
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise ConfigError(f"{source}:{number}: invalid JSON ({exc})") from None
        if not (isinstance(record, dict) and "pair_id" in record):
            bodies.append(line)
            continue
        body = _exported_body(record, f"{source}:{number}")
        cut += body == "cut"
        without_body += body is None
        bodies.append(orjson.dumps(body).decode() if isinstance(body, dict) else "")
    kept = any(bodies)
    items = builtin.parse_jsonl("\n".join(bodies), source=source) if kept else []
    return Workload(items, source=source, cut=cut, without_body=without_body)


def _exported_body(record: dict[str, Any], where: str) -> dict[str, Any] | str | None:
    """Return an exported pair's request body, "cut" if truncated, None if none was kept."""
    request = record.get("request")
    if request is None:
        return None
    if not isinstance(request, dict):
        raise ConfigError(f"{where}: 'request' must be an object")
    if "body" in (request.get("truncated") or ()):
        return "cut"
    body = request.get("body")
    if not isinstance(body, dict):
        return None
    path = COMPLETIONS_PATH if request.get("endpoint") == "completions" else CHAT_PATH
    if path == CHAT_PATH and not body.get("messages"):
        return None
    segment = record.get("segment")
    inputs = dict(request.get("inputs") or {})
    if isinstance(segment, str) and segment:
        inputs["segment"] = segment
    return {**body, "specgate": inputs}


def _why(found: Workload) -> str:
    parts = []
    if found.cut:
        parts.append(f"{found.cut} skipped with a cut prompt")
    if found.without_body:
        parts.append(
            f"{found.without_body} pairs without a request body "
            "(export them with `specgate pairs export --with-requests`)"
        )
    return f" ({'; '.join(parts)})" if parts else ""
