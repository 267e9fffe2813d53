"""What the gateway reads from a client's request before routing it: a JSON body within
its size limit, the segment and the tenant."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from gate.errors import BadRequest, GateError
from gate.request import segments


async def read_json_body(request: Request, limit: int) -> bytes:
    """Read a request body declared as JSON (or not declared), refusing one past `limit`."""
    _require_json(request)
    return await _read_body(request, limit)


def _require_json(request: Request) -> None:
    """Refuse a body declared as anything but JSON (no declaration is taken as JSON)."""
    declared = request.headers.get("content-type")
    if declared is None:
        return
    media = declared.partition(";")[0].strip().lower()
    if media != "application/json" and not media.endswith("+json"):
        raise GateError(
            f"the request body must be application/json, not {media or 'empty'!r}",
            status_code=415,
        )


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise GateError(f"request body exceeds {limit} bytes", status_code=413)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise GateError(f"request body exceeds {limit} bytes", status_code=413)
        chunks.append(chunk)
    return b"".join(chunks)


def segment_of(request: Request, body: dict[str, Any], inputs: dict[str, Any]) -> str:
    """Return the declared segment (header or inputs), else the one the body classifies as."""
    override = request.headers.get(segments.SEGMENT_HEADER) or inputs.get("segment")
    if override:
        if not isinstance(override, str) or not segments.valid_override(override):
            raise BadRequest("segment must match [a-z0-9_.:-]{1,64}")
        return override
    return segments.classify(body, inputs)


def tenant_of(inputs: dict[str, Any]) -> str | None:
    """Return the declared tenant, bounded."""
    tenant = inputs.get("tenant")
    return str(tenant)[:128] if tenant else None
