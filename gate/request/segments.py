"""Segments from request features only: json (tools / JSON mode), rag, code, creative, chat."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

SEGMENT_HEADER = "x-specgate-segment"
SEGMENTS = ("json", "rag", "code", "creative", "chat")
_CODE = re.compile(
    r"```|\bdef \w+\(|\bclass \w+[:(]|\bfunction \w+\(|#include|\bimport \w+|=>|;\s*$",
    re.MULTILINE,
)
_SEGMENT_NAME = re.compile(r"^[a-z0-9_.:-]{1,64}$")
CREATIVE_TEMPERATURE = 0.7
LONG_SYSTEM_CONTEXT = 2000


def classify(body: Mapping[str, Any], inputs: Mapping[str, Any]) -> str:
    """Return the prompt class of a request."""
    response_format = body.get("response_format")
    wants_json = isinstance(response_format, dict) and response_format.get("type") in (
        "json_object",
        "json_schema",
    )
    if body.get("tools") or body.get("functions") or wants_json:
        return "json"
    if inputs.get("context") or len(_system_text(body)) >= LONG_SYSTEM_CONTEXT:
        return "rag"
    if _CODE.search(_prompt_text(body)):
        return "code"
    temperature = body.get("temperature")
    if isinstance(temperature, int | float) and temperature >= CREATIVE_TEMPERATURE:
        return "creative"
    return "chat"


def valid_override(value: str) -> bool:
    """Whether a segment header value is an acceptable segment name."""
    return bool(_SEGMENT_NAME.match(value))


def prompt_text(body: Mapping[str, Any]) -> str:
    """Return the prompt as plain text (chat messages joined, or the completion prompt)."""
    return _prompt_text(body)


def _system_text(body: Mapping[str, Any]) -> str:
    return "\n".join(
        _content(m)
        for m in body.get("messages") or []
        if isinstance(m, dict) and m.get("role") == "system"
    )


def _prompt_text(body: Mapping[str, Any]) -> str:
    messages = body.get("messages")
    if isinstance(messages, list):
        return "\n".join(_content(m) for m in messages if isinstance(m, dict))
    prompt = body.get("prompt")
    if isinstance(prompt, list):
        return "\n".join(str(p) for p in prompt)
    return str(prompt or "")


def _content(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")
