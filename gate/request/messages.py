"""Chat messages and prompts as plain text: one reading for segments, capture and evaluators."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def message_text(message: Mapping[str, Any]) -> str:
    """Return the text of a chat message whose content is a string or a list of parts."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text", "") for p in content if isinstance(p, Mapping)]
        return "\n".join(p for p in parts if isinstance(p, str))
    if content is None:
        return ""
    return json.dumps(content, sort_keys=True)


def prompt_text(body: Mapping[str, Any]) -> str:
    """Return the prompt as plain text (chat messages joined, or the completion prompt)."""
    messages = body.get("messages")
    if isinstance(messages, list):
        return "\n".join(message_text(m) for m in messages if isinstance(m, Mapping))
    prompt = body.get("prompt")
    if isinstance(prompt, list):
        return "\n".join(str(p) for p in prompt)
    return str(prompt or "")
