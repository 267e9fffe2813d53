"""Problem JSON (RFC 9457) for every control API error."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from sqlalchemy.exc import DataError, IntegrityError, StatementError
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse

from gate.errors import GateError

log = logging.getLogger(__name__)
MEDIA_TYPE = "application/problem+json"


def problem(status: int, title: str, detail: str, code: str) -> JSONResponse:
    """Render one problem document."""
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail, "code": code}
    return JSONResponse(body, status_code=status, media_type=MEDIA_TYPE)


def install(app: FastAPI) -> None:
    """Register the handlers that turn errors into problem JSON."""

    @app.exception_handler(GateError)
    async def gate_error(_request: Request, exc: GateError) -> JSONResponse:
        return problem(exc.status_code, exc.code.replace("_", " "), exc.message, exc.code)

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
    async def http_error(_request: Request, exc: HTTPException) -> JSONResponse:
        return problem(exc.status_code, "error", str(exc.detail), "http_error")
