"""What the gateway needs from an HTTP client to call its routes, and the clients it has.

A `Transport` POSTs a JSON body to a route and hands back an `UpstreamResponse` once the
response head has arrived; the body is read as it comes. Failures are the errors below,
never a client library's own. Two implementations, chosen by `SPECGATE_UPSTREAM_TRANSPORT`:

- `http1` (the default): `gate.gateway.http1`, keep-alive connections parsed by httptools,
  the lean one;
- `httpx`: `gate.gateway.httpx_transport`, the same contract on httpx, for where a
  maintained library client matters more than CPU per request.

Both pass the same gateway tests (tests/gate/gateway, parametrised over the transport).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Literal, Protocol

TransportName = Literal["http1", "httpx"]
TRANSPORTS: tuple[TransportName, ...] = ("http1", "httpx")


class UpstreamError(Exception):
    """A route could not be reached, or broke the protocol or the connection."""


class Unreachable(UpstreamError):
    """No connection could be opened (refused, no route, unknown host): nothing was sent."""


class ConnectTimeout(TimeoutError):
    """No connection opened within the connect timeout: nothing was sent."""


class UpstreamResponse(Protocol):
    """A response whose head has arrived; its body is read as it comes."""

    @property
    def status(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]:
        """The response's headers, looked up by lower-case name."""
        ...

    @property
    def at_end(self) -> bool:
        """The whole body has arrived and has been handed out."""
        ...

    def chunks(self) -> AsyncIterator[bytes]:
        """Yield what has arrived, each time more arrives, to the end of the body. Raises
        TimeoutError when nothing arrives within the read timeout, UpstreamError when the
        connection breaks."""
        ...

    async def read(self) -> bytes:
        """The whole body; the connection is then given back (closed if reading failed)."""
        ...

    def release(self) -> None:
        """Give the connection back for reuse if the body was read to its end, else close it."""
        ...

    def close(self) -> None:
        """Close the connection (an abandoned answer: the upstream stops generating)."""
        ...


class Transport(Protocol):
    """POST to routes over kept-alive connections."""

    async def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> UpstreamResponse:
        """POST `body` to `url`; return once the response head has arrived. Raises
        UpstreamError (Unreachable: nothing was sent), TimeoutError (ConnectTimeout: no
        connection within the connect timeout; else no head within the read timeout)."""
        ...

    async def close(self) -> None:
        """Close idle connections; later calls are refused."""
        ...


def check_header(name: str, value: str) -> None:
    """Refuse a header that could smuggle a line or that HTTP/1.1 cannot carry. The
    message names the header, never its value (it may be a credential)."""
    if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
        raise UpstreamError(f"header {name!r} holds a line break")
    if not _latin1(value) or not _latin1(name):
        # A fixed message: the codec's own names the offending character.
        shown = repr(name) if _latin1(name) else "(name not Latin-1)"
        raise UpstreamError(f"header {shown} holds a character outside Latin-1")


def _latin1(text: str) -> bool:
    return all(ord(c) < 256 for c in text)
