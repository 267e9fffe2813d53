"""The `Transport` on httpx: the alternative to the hand-written HTTP/1.1 client
(`SPECGATE_UPSTREAM_TRANSPORT=httpx`).

The body is read by a task of its own into a buffer, as `gate.gateway.http1` reads it in
its protocol callbacks, so that the reader knows whether the end of the body came with
the last bytes it handed out (`at_end`) without waiting for more. Above HIGH_WATER_BYTES
unread, the task stops reading until the reader catches up. httpx's own failures become
the transport's errors; its default headers (user agent, accept-encoding...) are not sent,
so a route sees what the http1 client sends. As the http1 client, a request whose reused
connection the upstream closed as it went (no answer, within RETRY_WINDOW_S) is sent once
more on a new connection.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import AsyncIterator, Mapping

import httpx

from gate.gateway.http1 import HIGH_WATER_BYTES, RETRY_WINDOW_S
from gate.gateway.transport import ConnectTimeout, Unreachable, UpstreamError, check_header

# As the http1 client: below uvicorn's (and so vLLM's) 5 s keep-alive.
IDLE_TIMEOUT_S = 4.0
_HTTPX_LOG = logging.getLogger("httpx")


class HttpxTransport:
    """POST to routes through one httpx.AsyncClient (HTTP/1.1, kept-alive connections)."""

    def __init__(self, *, connect_timeout_s: float, read_timeout_s: float) -> None:
        self.connect_timeout_s = connect_timeout_s
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(read_timeout_s, connect=connect_timeout_s, pool=None),
            limits=httpx.Limits(
                max_connections=None,
                max_keepalive_connections=None,
                keepalive_expiry=IDLE_TIMEOUT_S,
            ),
            verify=ssl.create_default_context(),  # the system's CA store, as http1's
            follow_redirects=False,
            trust_env=False,
        )
        for name in list(self._client.headers):
            del self._client.headers[name]
        self._closed = False
        # httpx logs every request at INFO: a line per route call (which spans and metrics
        # already record), enough to fill a log pipe nobody drains and stall the gateway.
        # Warnings pass; a level set on purpose stays.
        if _HTTPX_LOG.level == logging.NOTSET:
            _HTTPX_LOG.setLevel(logging.WARNING)

    async def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> HttpxResponse:
        """POST `body` to `url`; return once the response head has arrived."""
        if self._closed:
            raise UpstreamError("the client is closed")
        for name, value in headers.items():
            check_header(name, value)
        raw = [(n.encode("latin-1"), v.encode("latin-1")) for n, v in headers.items()]
        try:
            try:
                return await self._send(url, body, raw)
            except _FreshFailure:
                # The upstream closed the kept-alive connection as we wrote: one new try,
                # as the http1 client does.
                return await self._send(url, body, raw, retry=False)
        except httpx.ConnectTimeout:
            raise ConnectTimeout(
                f"no connection to {_authority(url)} within {self.connect_timeout_s} s"
            ) from None
        except httpx.ConnectError as exc:
            raise Unreachable(f"cannot connect to {_authority(url)}: {exc}") from exc
        except httpx.TimeoutException:
            raise TimeoutError("no answer from the upstream within the read timeout") from None
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise UpstreamError(f"{type(exc).__name__}: {exc}") from exc

    async def _send(
        self, url: str, body: bytes, headers: list[tuple[bytes, bytes]], *, retry: bool = True
    ) -> HttpxResponse:
        attempt = _Attempt()
        request = self._client.build_request(
            "POST", url, content=body, headers=headers, extensions={"trace": attempt.trace}
        )
        try:
            response = await self._client.send(request, stream=True)
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
            if retry and attempt.fresh_failure():
                raise _FreshFailure from exc
            raise
        return HttpxResponse(response)

    async def close(self) -> None:
        """Close every idle connection; later calls are refused."""
        self._closed = True
        await self._client.aclose()


class _FreshFailure(Exception):
    """A reused connection died right after the request went, before any answer."""


class _Attempt:
    """What httpcore's trace tells about one send: whether it opened a connection (else
    it reused a kept-alive one) and when the request had been written."""

    def __init__(self) -> None:
        self.reused = True
        self.sent_at: float | None = None

    async def trace(self, name: str, info: Mapping[str, object]) -> None:
        if name.startswith("connection.connect_tcp."):
            self.reused = False
        elif name == "http11.send_request_body.complete":
            self.sent_at = asyncio.get_running_loop().time()

    def fresh_failure(self) -> bool:
        """A reused connection failed while the request was written or within
        RETRY_WINDOW_S after, without an answer (httpx raises before the head arrived):
        the upstream was closing it, safe to send again."""
        if not self.reused:
            return False
        now = asyncio.get_running_loop().time()
        return self.sent_at is None or now - self.sent_at < RETRY_WINDOW_S


class HttpxResponse:
    """An httpx response whose head has arrived; a task reads its body as it comes."""

    def __init__(self, response: httpx.Response) -> None:
        self.status = response.status_code
        self.headers: Mapping[str, str] = response.headers
        self._response = response
        self._chunks: list[bytes] = []
        self._buffered = 0
        self._complete = False
        self._error: BaseException | None = None
        self._arrived = asyncio.Event()
        self._drained = asyncio.Event()
        self._drained.set()
        self._reader = asyncio.get_running_loop().create_task(self._read())

    @property
    def at_end(self) -> bool:
        """The whole body has arrived and has been handed out."""
        return self._complete and not self._chunks

    async def chunks(self) -> AsyncIterator[bytes]:
        """Yield everything that has arrived, each time more arrives, to the end."""
        while True:
            if self._chunks and not self._complete:
                # httpcore passes one checkpoint (a zero sleep) between the last bytes and
                # the end of the body that came with them: let the reader get there, so
                # that `at_end` knows, as http1's does, without waiting for more bytes.
                await asyncio.sleep(0)
            if self._chunks:
                data = b"".join(self._chunks) if len(self._chunks) > 1 else self._chunks[0]
                self._chunks.clear()
                self._buffered = 0
                self._drained.set()
                yield data
            elif self._error is not None:
                raise self._error
            elif self._complete:
                return
            else:
                self._arrived.clear()
                await self._arrived.wait()

    async def read(self) -> bytes:
        """Read the whole body and give the connection back (closed if reading fails)."""
        try:
            parts = [chunk async for chunk in self.chunks()]
        finally:
            self.release()
        return b"".join(parts)

    def release(self) -> None:
        """Give the connection back if the body was read to its end (httpx does so at
        the end of the body), else close it."""
        if not (self._complete and self._error is None):
            self.close()

    def close(self) -> None:
        """Close the connection (an abandoned answer: the upstream stops generating)."""
        if not self._reader.done():
            # Cancelled mid-body, httpx closes the connection rather than reuse it.
            self._reader.cancel()

    async def _read(self) -> None:
        try:
            async for data in self._response.aiter_raw():
                self._chunks.append(data)
                self._buffered += len(data)
                self._arrived.set()
                if self._buffered > HIGH_WATER_BYTES:
                    self._drained.clear()
                    await self._drained.wait()
            self._complete = True
        except httpx.TimeoutException:
            self._error = TimeoutError("no data from the upstream within the read timeout")
        except Exception as exc:  # httpx's errors, and anything its stream raises
            self._error = UpstreamError(f"the upstream broke the answer: {exc}")
        finally:
            self._arrived.set()
            await self._response.aclose()


def _authority(url: str) -> str:
    return httpx.URL(url).netloc.decode("ascii", "replace")
