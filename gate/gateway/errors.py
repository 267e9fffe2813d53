"""OpenAI-style error bodies for the proxy endpoints."""

from __future__ import annotations

import orjson
from starlette.responses import Response

from gate.errors import GateError

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "invalid_request_error",
    502: "upstream_error",
    504: "upstream_timeout",
}


def openai_error(status: int, message: str, *, code: str | None = None) -> Response:
    """Render an error the way OpenAI clients expect it."""
    body = {
        "error": {
            "message": message,
            "type": _TYPES.get(status, "api_error"),
            "param": None,
            "code": code,
        }
    }
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")


def from_gate_error(exc: GateError) -> Response:
    """Render a GateError as an OpenAI-style error."""
    return openai_error(exc.status_code, exc.message, code=exc.code)
