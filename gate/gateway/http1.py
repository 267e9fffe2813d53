"""The gateway's HTTP/1.1 client for route calls: keep-alive connections on asyncio
protocols, responses parsed by httptools (llhttp, the parser uvicorn serves with).

Through aiohttp, a streamed route call spent about a fifth of the gateway's core (py-spy,
64 streams) in machinery the gateway does not need (URL and header objects, cookie and
tracing hooks, its stream reader): it only POSTs JSON to a route and reads the answer
back as it arrives. Connections are kept per origin and reused; a call that is abandoned before its
answer has been read to the end closes its connection, which is how an upstream learns
to stop generating.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httptools

from gate.gateway.transport import ConnectTimeout, Unreachable, UpstreamError, check_header

__all__ = ["ConnectTimeout", "Pool", "Response", "Unreachable", "UpstreamError"]

# A reader this far behind stops reading from its upstream until it catches up.
HIGH_WATER_BYTES = 256 * 1024
# A reused connection that fails this soon after the request was written, before any
# answer, was being closed by the upstream as we wrote: the request is sent again. Later
# failures are not retried (the upstream may have been generating all along).
RETRY_WINDOW_S = 1.0


@dataclass(frozen=True)
class Origin:
    """Where a route lives: scheme, host and port."""

    scheme: str
    host: str
    port: int

    @classmethod
    def parse(cls, url: str) -> Origin:
        """Parse the origin of a URL, e.g. http://10.0.0.7:8000."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UpstreamError(f"not an http(s) URL: {url!r}")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return cls(parts.scheme, parts.hostname, port)

    @property
    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == default else f"{host}:{self.port}"


class Response:
    """A response whose head has arrived; its body is read as it comes."""

    def __init__(self, connection: _Connection, status: int, headers: dict[str, str]) -> None:
        self.status = status
        self.headers = headers
        self._connection = connection
        self._chunks: list[bytes] = []
        self._buffered = 0
        self._complete = False
        self._error: Exception | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._finished = False

    @property
    def at_end(self) -> bool:
        """The whole body has arrived and has been handed out."""
        return self._complete and not self._chunks

    async def chunks(self) -> AsyncIterator[bytes]:
        """Yield everything that has arrived, each time more arrives, to the end."""
        while True:
            if self._chunks:
                data = b"".join(self._chunks) if len(self._chunks) > 1 else self._chunks[0]
                self._chunks.clear()
                if self._buffered > HIGH_WATER_BYTES:
                    self._connection.resume()
                self._buffered = 0
                yield data
            elif self._error is not None:
                raise self._error
            elif self._complete:
                return
            else:
                await self._wait()

    async def read(self) -> bytes:
        """Read the whole body and give the connection back (closed if reading fails)."""
        try:
            parts = [chunk async for chunk in self.chunks()]
        finally:
            self.release()
        return b"".join(parts)

    def release(self) -> None:
        """Give the connection back for reuse if the body was read to its end, else close it."""
        self._settle(reusable=self._complete and self._error is None)

    def close(self) -> None:
        """Close the connection (an abandoned answer: the upstream stops generating)."""
        self._settle(reusable=False)

    def _settle(self, *, reusable: bool) -> None:
        if not self._finished:
            self._finished = True
            self._connection.finished(reusable=reusable)

    async def _wait(self) -> None:
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        timer = loop.call_later(self._connection.read_timeout_s, _expire, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None

    def _feed(self, data: bytes) -> None:
        self._chunks.append(data)
        self._buffered += len(data)
        if self._buffered > HIGH_WATER_BYTES:
            self._connection.pause()
        self._wake()

    def _end(self, error: Exception | None = None) -> None:
        if error is None:
            self._complete = True
        elif not self._complete:
            self._error = error
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)


def _expire(waiter: asyncio.Future[Any]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError("no data from the upstream within the read timeout"))


class _Connection(asyncio.Protocol):
    """One keep-alive connection: one request at a time, its response parsed as it arrives."""

    def __init__(self, pool: Pool, key: Origin) -> None:
        self.pool = pool
        self.key = key
        self.read_timeout_s = pool.read_timeout_s
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self._parser = httptools.HttpResponseParser(self)
        self._head: asyncio.Future[Response] | None = None
        self._headers: dict[str, str] = {}
        self._response: Response | None = None
        self._got_bytes = False
        self._sent_at = 0.0
        self._paused = False

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self._head is None and self._response is None:
            self._abort()  # bytes nobody asked for: the connection cannot be trusted
            return
        self._got_bytes = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(UpstreamError("the upstream switched protocols"))
        except httptools.HttpParserError as exc:
            self._fail(UpstreamError(f"the upstream sent a malformed HTTP response: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._response is not None and self._until_eof() and exc is None:
            self._response._end()
            return
        reason = f": {exc}" if exc else ""
        self._fail(UpstreamError(f"the upstream closed the connection{reason}"))

    # httptools callbacks

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if 100 <= status < 200:  # an interim response: the real one follows
            self._headers = {}
            return
        head, self._head = self._head, None
        if head is None or head.done():
            # Raised through feed_data as a parser error: the connection is dropped.
            raise UpstreamError("the upstream sent a response nobody asked for")
        response = Response(self, status, self._headers)
        self._response = response
        head.set_result(response)

    def on_body(self, body: bytes) -> None:
        if self._response is not None:
            self._response._feed(body)

    def on_message_complete(self) -> None:
        if self._response is not None:
            self._response._end()
            if not self._parser.should_keep_alive():
                self.closed = True

    # the pool's side

    async def send(self, request: bytes) -> Response:
        """Write a request and wait for its response head (bounded by the read timeout)."""
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        head: asyncio.Future[Response] = loop.create_future()
        self._head = head
        self._headers, self._response, self._got_bytes = {}, None, False
        self._sent_at = loop.time()
        self.transport.write(request)
        timer = loop.call_later(self.read_timeout_s, _expire, head)
        try:
            return await head
        except BaseException:
            self._abort()
            raise
        finally:
            timer.cancel()

    def finished(self, *, reusable: bool) -> None:
        """The response is done with: back to the pool, or closed."""
        self._response = None
        if reusable and not self.closed and not self._paused:
            self.pool.give_back(self)
        else:
            self._abort()

    def pause(self) -> None:
        if not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()

    def resume(self) -> None:
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()

    @property
    def usable(self) -> bool:
        """Open, as far as this side knows."""
        return not self.closed and self.transport is not None and not self.transport.is_closing()

    @property
    def fresh_failure(self) -> bool:
        """The connection died right after the request was written, before a byte of the
        answer: the upstream was closing it, safe to retry elsewhere."""
        elapsed = asyncio.get_running_loop().time() - self._sent_at
        return not self._got_bytes and elapsed < RETRY_WINDOW_S

    def _until_eof(self) -> bool:
        """A response with neither length nor chunking ends when the connection closes."""
        headers = self._response.headers if self._response is not None else {}
        return (
            "content-length" not in headers
            and "chunked" not in headers.get("transfer-encoding", "").lower()
        )

    def _fail(self, error: Exception) -> None:
        head, self._head = self._head, None
        if head is not None and not head.done():
            head.set_exception(error)
        if self._response is not None:
            self._response._end(error)
        self._abort()

    def _abort(self) -> None:
        self.closed = True
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()


class Pool:
    """Keep-alive connections per origin; POST a body, get a streaming Response (the
    default `Transport`)."""

    def __init__(
        self,
        *,
        connect_timeout_s: float,
        read_timeout_s: float,
        idle_timeout_s: float = 4.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        # Below uvicorn's (and so vLLM's) 5 s keep-alive: a reused connection is rarely
        # one the upstream is closing at that moment.
        self.idle_timeout_s = idle_timeout_s
        self._ssl = ssl_context
        self._idle: dict[Origin, deque[_Connection]] = {}
        self._origins: dict[str, Origin] = {}
        self._closed = False

    async def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> Response:
        """POST `body` to `url`; return once the response head has arrived.

        Raises UpstreamError (unreachable, reset, malformed) or TimeoutError."""
        origin, path = self._split(url)
        request = _request_head(origin, path, len(body), headers) + body
        connection = self._reuse(origin)
        if connection is not None:
            try:
                return await connection.send(request)
            except UpstreamError:
                if not connection.fresh_failure:
                    raise
                # The upstream closed the idle connection as we wrote: one new try.
        connection = await self._connect(origin)
        return await connection.send(request)

    def give_back(self, connection: _Connection) -> None:
        if self._closed:
            connection._abort()
            return
        connection.idle_since = time.monotonic()
        self._idle.setdefault(connection.key, deque()).append(connection)

    async def close(self) -> None:
        """Close every idle connection; later calls are refused."""
        self._closed = True
        for idle in self._idle.values():
            for connection in idle:
                connection._abort()
        self._idle.clear()

    def _split(self, url: str) -> tuple[Origin, str]:
        scheme, _, rest = url.partition("://")
        authority, slash, path = rest.partition("/")
        base = f"{scheme}://{authority}"
        origin = self._origins.get(base)
        if origin is None:
            origin = self._origins[base] = Origin.parse(base)
        return origin, slash + path if slash else "/"

    def _reuse(self, origin: Origin) -> _Connection | None:
        """The most recently used live connection to `origin`; connections idle past the
        idle timeout (the oldest, at the left) or closed are closed and dropped."""
        idle = self._idle.get(origin)
        if not idle:
            return None
        horizon = time.monotonic() - self.idle_timeout_s
        while idle and (idle[0].idle_since < horizon or not idle[0].usable):
            idle.popleft()._abort()
        while idle:
            connection = idle.pop()
            if connection.usable:
                return connection
            connection._abort()
        return None

    async def _connect(self, origin: Origin) -> _Connection:
        if self._closed:
            raise UpstreamError("the client is closed")
        loop = asyncio.get_running_loop()
        context = None
        if origin.scheme == "https":
            if self._ssl is None:
                self._ssl = ssl.create_default_context()  # loads the CA store: once
            context = self._ssl
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, connection = await loop.create_connection(
                    lambda: _Connection(self, origin), origin.host, origin.port, ssl=context
                )
        except TimeoutError:  # an OSError too: keep it a timeout
            raise ConnectTimeout(
                f"no connection to {origin.host}:{origin.port} within {self.connect_timeout_s} s"
            ) from None
        except OSError as exc:
            raise Unreachable(f"cannot connect to {origin.host}:{origin.port}: {exc}") from exc
        return connection


def _request_head(origin: Origin, path: str, length: int, headers: Mapping[str, str]) -> bytes:
    if any(c in path for c in " \r\n"):
        raise UpstreamError(f"the route path {path!r} holds a space or line break")
    lines = [f"POST {path} HTTP/1.1", f"host: {origin.host_header}", f"content-length: {length}"]
    for name, value in headers.items():
        check_header(name, value)
        lines.append(f"{name}: {value}")
    try:
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    except UnicodeEncodeError:
        raise UpstreamError("the route URL holds a character outside Latin-1") from None
