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
    405: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    499: "invalid_request_error",
    502: "upstream_error",
    504: "upstream_timeout",
}
# Codes of the gateway's own answers, where the error raised named no specific one.
_CODES = {
    405: "method_not_allowed",
    413: "request_too_large",
    415: "unsupported_media_type",
    499: "client_closed_request",
    502: "upstream_unreachable",
    504: "upstream_timeout",
}


def openai_error(
    status: int,
    message: str,
    *,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    """Render an error the way OpenAI clients expect it."""
    body = {
        "error": {
            "message": message,
            "type": _TYPES.get(status, "api_error"),
            "param": None,
            "code": code,
        }
    }
    return Response(
        orjson.dumps(body), status_code=status, media_type="application/json", headers=headers
    )


def from_gate_error(exc: GateError) -> Response:
    """Render a GateError as an OpenAI-style error."""
    code = exc.code
    if code == GateError.code:  # the generic one: name what happened
        code = _CODES.get(exc.status_code, code)
    return openai_error(exc.status_code, exc.message, code=code)


def method_not_allowed(path: str) -> Response:
    """The answer to anything but POST on a proxy endpoint."""
    return openai_error(
        405,
        f"{path} takes POST only",
        code=_CODES[405],
        headers={"allow": "POST"},
    )
