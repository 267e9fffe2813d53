"""Tool calling for models whose chat template has none: a prompt in, a JSON call out.

SmolLM2's template ignores `tools`, so both backends get the same instruction in the system
message and the answer is parsed as `{"name": ..., "arguments": {...}}`, the way llama.cpp's
generic tool format works. Text that opens like JSON is held back until it is known not to
be a call, so a call never leaks out as content.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

from gate.engines.base import Emit, GenRequest

_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


def tool_request(request: GenRequest) -> GenRequest:
    """Return the request with its tools described in the system message."""
    if not request.tools or not request.chat:
        return request
    specs = [t.get("function", t) for t in request.tools]
    listed = "\n".join(f"- {_signature(spec)}: {spec.get('description', '')}" for spec in specs)
    example = json.dumps({"name": specs[0].get("name"), "arguments": _example(specs[0])})
    instruction = (
        f"You can call these tools:\n{listed}\n"
        "To call a tool, reply with only one line of JSON with the tool's name and arguments, "
        f"for example: {example}"
    )
    messages = list(request.messages)
    if messages and messages[0].get("role") == "system":
        first = messages[0]
        messages[0] = {**first, "content": f"{first.get('content') or ''}\n\n{instruction}"}
    else:
        messages.insert(0, {"role": "system", "content": instruction})
    if request.tool_choice == "required":
        # As vLLM does for tool_choice=required: constrain the answer to a call (the grammar
        # is enforced by llama.cpp; the transformers reference leaves it to the prompt).
        names = [spec.get("name") for spec in specs]
        call = {
            "type": "object",
            "properties": {"name": {"enum": names}, "arguments": {"type": "object"}},
            "required": ["name", "arguments"],
        }
        schema = {"type": "json_schema", "json_schema": {"name": "tool_call", "schema": call}}
        return replace(request, messages=messages, tools=None, response_format=schema)
    return replace(request, messages=messages, tools=None)


def _parameters(spec: dict[str, Any]) -> dict[str, Any]:
    parameters = spec.get("parameters")
    properties = parameters.get("properties") if isinstance(parameters, dict) else None
    return properties if isinstance(properties, dict) else {}


def _signature(spec: dict[str, Any]) -> str:
    return f"{spec.get('name')}({', '.join(_parameters(spec))})"


def _example(spec: dict[str, Any]) -> dict[str, Any]:
    placeholders = {"integer": 1, "number": 1.0, "boolean": True}
    return {
        name: placeholders.get(str(schema.get("type")), "...")
        if isinstance(schema, dict)
        else "..."
        for name, schema in list(_parameters(spec).items())[:2]
    }


def parse_call(text: str, names: set[str]) -> dict[str, Any] | None:
    """Return an OpenAI tool call when the whole answer is a JSON call of a declared tool."""
    fenced = _FENCE.match(text)
    try:
        value = json.loads(fenced.group(1) if fenced else text)
    except ValueError:
        return None
    if not isinstance(value, dict) or value.get("name") not in names:
        return None
    arguments = value.get("arguments", value.get("parameters", {}))
    return {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": value["name"], "arguments": json.dumps(arguments)},
    }


@dataclass
class ToolSniffer:
    """Wraps a backend's emit: holds back text that may be a tool call."""

    emit: Emit
    names: set[str]
    held: list[str] = field(default_factory=list)
    holding: bool | None = None  # None until the first non-blank text decides

    def __call__(self, delta: dict[str, Any]) -> bool:
        """Forward or hold one delta; return False when the client left."""
        content = delta.get("content")
        if not isinstance(content, str):
            return self.emit(delta)
        if self.holding is None and content.strip():
            self.holding = content.lstrip().startswith(("{", "`"))
        if self.holding is not False:
            self.held.append(content)
            return self.emit({})  # keeps the cancellation check without sending text
        return self.emit(delta)

    def finish(self, text: str) -> dict[str, Any] | None:
        """Return the call the answer makes, or release the held text as content."""
        call = parse_call(text, self.names)
        if call is not None:
            self.emit({"tool_calls": [{"index": 0, **call}]})
        elif self.held:
            self.emit({"content": "".join(self.held)})
        return call


def tool_names(request: GenRequest) -> set[str]:
    """Return the names of the request's declared function tools."""
    names = set()
    for tool in request.tools or ():
        function = tool.get("function", tool)
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            names.add(function["name"])
    return names
