"""Problem JSON (RFC 9457) for every control API error."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from sqlalchemy.exc import DataError, IntegrityError, StatementError
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.routing import Match

from gate.errors import GateError, Unauthorized

log = logging.getLogger(__name__)
MEDIA_TYPE = "application/problem+json"
_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")
CHALLENGE = 'Bearer realm="specgate"'


# Every error the control API answers, as documented in its OpenAPI.
PROBLEM_SCHEMA: dict[str, Any] = {
    "title": "Problem",
    "type": "object",
    "required": ["type", "title", "status", "detail", "code"],
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "code": {"type": "string"},
    },
}
_STATUSES = {
    400: "Bad request",
    401: "No valid API key (the answer carries WWW-Authenticate: Bearer)",
    403: "The key lacks the scope",
    404: "Not found",
    405: "Method not allowed (the answer carries Allow)",
    409: "Conflict: a state, version or Idempotency-Key that does not fit",
    413: "The body is over the size limit",
    422: "Invalid request",
    500: "Internal error",
    503: "Database unavailable, or the change was not committed",
}
RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"description": text, "content": {MEDIA_TYPE: {"schema": PROBLEM_SCHEMA}}}
    for status, text in _STATUSES.items()
}


def problem(
    status: int, title: str, detail: str, code: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    """Render one problem document."""
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail, "code": code}
    return JSONResponse(body, status_code=status, media_type=MEDIA_TYPE, headers=headers)


def install(app: FastAPI) -> None:
    """Register the handlers that turn errors into problem JSON."""

    @app.exception_handler(GateError)
    async def gate_error(_request: Request, exc: GateError) -> JSONResponse:
        challenge = {"WWW-Authenticate": CHALLENGE} if isinstance(exc, Unauthorized) else None
        title = exc.code.replace("_", " ")
        return problem(exc.status_code, title, exc.message, exc.code, challenge)

    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        where = ".".join(str(part) for part in first.get("loc", ()))
        detail = f"{where}: {first.get('msg')}" if where else str(first.get("msg"))
        return problem(422, "invalid request", detail, "invalid_request")

    # Input the database itself refuses (a unique key taken by a concurrent request, NUL
    # bytes in text, out-of-range numbers) is the caller's problem, never a 500.
    @app.exception_handler(IntegrityError)
    async def conflict(_request: Request, exc: IntegrityError) -> JSONResponse:
        return problem(409, "conflict", "the change conflicts with existing data", "conflict")

    @app.exception_handler(StatementError)
    async def refused(request: Request, exc: StatementError) -> JSONResponse:
        if isinstance(exc, DataError) or isinstance(exc.orig, ValueError):
            return problem(
                400,
                "invalid request",
                "a value was refused by the database (NUL bytes or out-of-range numbers)",
                "invalid_request",
            )
        raise exc

    # Anything else is still an answer the client can read, on a connection it can reuse.
    @app.exception_handler(Exception)
    async def unexpected(_request: Request, exc: Exception) -> JSONResponse:
        log.exception("control_api_error error=%s", type(exc).__name__)
        return problem(500, "internal error", "the server failed; see its log", "internal_error")

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            headers["Allow"] = ", ".join(allowed_methods(request))
        return problem(exc.status_code, "error", str(exc.detail), "http_error", headers)


def allowed_methods(request: Request) -> list[str]:
    """Return every method some route serves at this path (Starlette names only the first)."""
    return [
        method
        for method in _METHODS
        if any(
            route.matches({**request.scope, "method": method})[0] is Match.FULL
            for route in request.app.router.routes
        )
    ]
