"""Segments from request features only: json (tools / JSON mode), rag, code, creative, chat."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gate.request.messages import message_text, prompt_text

SEGMENT_HEADER = "x-specgate-segment"
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
    if _CODE.search(prompt_text(body)):
        return "code"
    temperature = body.get("temperature")
    if isinstance(temperature, int | float) and temperature >= CREATIVE_TEMPERATURE:
        return "creative"
    return "chat"


def valid_override(value: str) -> bool:
    """Whether a segment header value is an acceptable segment name."""
    return bool(_SEGMENT_NAME.match(value))


def _system_text(body: Mapping[str, Any]) -> str:
    return "\n".join(
        message_text(m)
        for m in body.get("messages") or []
        if isinstance(m, dict) and m.get("role") == "system"
    )
