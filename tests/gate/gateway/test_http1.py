"""The gateway's HTTP/1.1 client against scripted servers on 127.0.0.1: keep-alive reuse,
timeouts, broken and malformed answers, back-pressure, abandoned calls."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from gate.gateway.http1 import HIGH_WATER_BYTES, RETRY_WINDOW_S, Pool, UpstreamError

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """Read one request; return its head and body."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return head, await reader.readexactly(length)


def reply(body: bytes, *, status: int = 200, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 %d X\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%s\r\n%s" % (
        status,
        len(body),
        extra,
        body,
    )


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def answering(answer: bytes, *, every: bool = False) -> Handler:
    """A handler that answers the first request (or `every` request) with `answer`."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await read_request(reader)
            writer.write(answer)
            await writer.drain()
            if not every:
                return

    return handler


async def serving(handler: Handler, work: Callable[[str], Awaitable[None]]) -> int:
    """Run `work(base_url)` against a server running `handler` per connection; return
    how many connections the server accepted."""
    accepted = 0

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal accepted
        accepted += 1
        try:
            await handler(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        await work(f"http://127.0.0.1:{port}")
    return accepted


def pool(**kwargs: float) -> Pool:
    return Pool(connect_timeout_s=2.0, read_timeout_s=kwargs.pop("read_timeout_s", 5.0), **kwargs)


def answer_to_one_post(answer: bytes) -> tuple[int, bytes]:
    """Post once to a server that answers with `answer`; return the status and body."""
    got: list[tuple[int, bytes]] = []

    async def work(base: str) -> None:
        client = pool()
        response = await client.post(f"{base}/x", b"", {})
        got.append((response.status, await response.read()))
        await client.close()

    asyncio.run(serving(answering(answer), work))
    return got[0]


def test_posts_reuse_one_keep_alive_connection():
    seen: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head, body = await read_request(reader)
            seen.append(head + body)
            writer.write(reply(b'{"ok":%s}' % body))

    async def work(base: str) -> None:
        client = pool()
        for i in range(3):
            response = await client.post(f"{base}/v1/chat", b"%d" % i, {"traceparent": "00-a"})
            assert (response.status, await response.read()) == (200, b'{"ok":%d}' % i)
            assert response.headers["content-type"] == "application/json"
        await client.close()

    assert asyncio.run(serving(handler, work)) == 1
    assert seen[0].startswith(b"POST /v1/chat HTTP/1.1\r\nhost: 127.0.0.1:")
    assert b"\r\ntraceparent: 00-a\r\n" in seen[0] and seen[0].endswith(b"\r\n\r\n0")


def test_a_connection_the_upstream_closed_while_idle_is_replaced():
    async def work(base: str) -> None:
        client = pool()
        for _ in range(3):
            response = await client.post(f"{base}/x", b"{}", {})
            assert await response.read() == b"{}"
        await client.close()

    # keep-alive by default, but closed right after each answer
    assert asyncio.run(serving(answering(reply(b"{}")), work)) == 3


def test_connection_close_and_bodies_that_end_with_the_connection():
    handler = answering(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nall of it")

    async def work(base: str) -> None:
        client = pool()
        for _ in range(2):
            assert await (await client.post(f"{base}/x", b"", {})).read() == b"all of it"
        await client.close()

    assert asyncio.run(serving(handler, work)) == 2


def test_chunked_answers_arrive_as_they_are_written():
    step = asyncio.Event

    async def run() -> None:
        go = step()

        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + chunk(b"one"))
            await go.wait()
            writer.write(chunk(b"two") + b"0\r\n\r\n")
            await reader.read()

        async def work(base: str) -> None:
            client = pool()
            response = await client.post(f"{base}/x", b"", {})
            parts = response.chunks()
            assert await anext(parts) == b"one"  # before the rest was even written
            assert not response.at_end
            go.set()
            assert [p async for p in parts] == [b"two"]
            assert response.at_end
            response.release()
            await client.close()

        await serving(handler, work)

    asyncio.run(run())


def test_no_answer_within_the_read_timeout():
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await reader.read()  # never answers; returns when the client gives up

    async def work(base: str) -> None:
        client = pool(read_timeout_s=0.3)
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            await client.post(f"{base}/x", b"", {})
        assert time.monotonic() - started < 3
        await client.close()

    asyncio.run(serving(handler, work))


def test_a_stream_that_stalls_mid_answer_times_out_and_is_closed():
    closed = asyncio.Event

    async def run() -> None:
        gone = closed()

        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + chunk(b"a"))
            await reader.read()  # EOF: the client closed the connection
            gone.set()

        async def work(base: str) -> None:
            client = pool(read_timeout_s=0.3)
            response = await client.post(f"{base}/x", b"", {})
            with pytest.raises(TimeoutError):
                async for _ in response.chunks():
                    pass
            response.release()  # not read to the end: closed, never reused
            await asyncio.wait_for(gone.wait(), 5)
            await client.close()

        await serving(handler, work)

    asyncio.run(run())


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (b"<html>502 bad gateway</html>\r\n\r\n", "malformed"),
        (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nab", "closed"),
        (b"", "closed"),
    ],
    ids=["not-http", "cut-mid-body", "closed-at-once"],
)
def test_broken_answers_are_upstream_errors(answer, message):
    async def work(base: str) -> None:
        client = pool()
        with pytest.raises(UpstreamError, match=message):
            response = await client.post(f"{base}/x", b"", {})
            await response.read()
        await client.close()

    asyncio.run(serving(answering(answer), work))


def test_an_unreachable_route_is_an_upstream_error():
    async def run() -> None:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        with pytest.raises(UpstreamError, match="cannot connect"):
            await pool().post(f"http://127.0.0.1:{port}/x", b"", {})

    asyncio.run(run())


def test_a_slow_reader_pauses_the_upstream_and_loses_nothing():
    body = bytes(range(256)) * (16 * HIGH_WATER_BYTES // 256)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body))
        for i in range(0, len(body), 16384):
            writer.write(body[i : i + 16384])
            await writer.drain()

    async def work(base: str) -> None:
        client = pool()
        response = await client.post(f"{base}/x", b"", {})
        received = []
        held = 0
        async for part in response.chunks():
            received.append(part)
            await asyncio.sleep(0.01)  # slower than the upstream
            held = max(held, response._buffered)
        assert b"".join(received) == body
        # paused: what waits in memory stays near the high-water mark, not the body
        assert held <= 2 * HIGH_WATER_BYTES
        response.release()
        await client.close()

    asyncio.run(serving(handler, work))


def test_error_statuses_come_back_with_their_body():
    answer = reply(b'{"error":"nope"}', status=400)
    assert answer_to_one_post(answer) == (400, b'{"error":"nope"}')


def test_header_values_cannot_smuggle_lines():
    async def run() -> None:
        with pytest.raises(UpstreamError, match="line break"):
            await pool().post("http://127.0.0.1:9/x", b"", {"tracestate": "a\r\nx-evil: 1"})

    asyncio.run(run())


def test_a_reused_connection_that_dies_before_answering_is_retried_once_on_a_new_one():
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(reply(b"{}"))
        await read_request(reader)  # the second request on this connection: hang up

    async def work(base: str) -> None:
        client = pool()
        for _ in range(3):
            assert await (await client.post(f"{base}/x", b"", {})).read() == b"{}"
        await client.close()

    # first call: connection 1; second: 1 dies unanswered, 2 answers; third: 2 dies, 3
    assert asyncio.run(serving(handler, work)) == 3


def test_bytes_after_a_complete_answer_drop_the_connection():
    handler = answering(reply(b"{}") + reply(b'{"unasked":1}'), every=True)

    async def work(base: str) -> None:
        client = pool()
        for _ in range(2):  # each answer is right; the connection is never reused
            assert await (await client.post(f"{base}/x", b"", {})).read() == b"{}"
        await client.close()

    assert asyncio.run(serving(handler, work)) == 2


def test_an_interim_response_is_skipped():
    answer = b"HTTP/1.1 100 Continue\r\n\r\n" + reply(b"{}")
    assert answer_to_one_post(answer) == (200, b"{}")


def test_a_connect_timeout_is_a_timeout():
    async def run() -> None:
        # A listener whose accept queue is full: the kernel drops further SYNs.
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen(0)
            port = listener.getsockname()[1]
            fillers = []
            for _ in range(3):
                filler = socket.socket()
                filler.setblocking(False)
                filler.connect_ex(("127.0.0.1", port))
                fillers.append(filler)
            await asyncio.sleep(0.1)
            client = Pool(connect_timeout_s=0.3, read_timeout_s=5.0)
            with pytest.raises(TimeoutError, match="no connection"):
                await client.post(f"http://127.0.0.1:{port}/x", b"", {})
            for filler in fillers:
                filler.close()

    asyncio.run(run())


def test_connections_idle_past_the_idle_timeout_are_not_reused():
    handler = answering(reply(b"{}"), every=True)

    async def work(base: str) -> None:
        client = pool(idle_timeout_s=0.2)
        for pause in (0.0, 0.4, 0.0):  # reused, replaced, reused
            await asyncio.sleep(pause)
            assert await (await client.post(f"{base}/x", b"", {})).read() == b"{}"
        await client.close()

    assert asyncio.run(serving(handler, work)) == 2


def test_a_reused_connection_that_dies_late_is_not_retried():
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(reply(b"{}"))
        await read_request(reader)
        await asyncio.sleep(RETRY_WINDOW_S + 0.3)  # "generating", then the upstream dies

    async def work(base: str) -> None:
        client = pool()
        assert await (await client.post(f"{base}/x", b"", {})).read() == b"{}"
        with pytest.raises(UpstreamError, match="closed"):
            await client.post(f"{base}/x", b"", {})
        await client.close()

    assert asyncio.run(serving(handler, work)) == 1


def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, made by the openssl command."""
    if shutil.which("openssl") is None:
        reason = "no openssl command (apt-get install -y openssl)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{reason}: required when CI=true", pytrace=False)
        pytest.skip(reason)
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


def test_https_routes_are_verified_and_kept_alive(tmp_path):
    cert, key = self_signed(tmp_path)
    server_side = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_side.load_cert_chain(cert, key)
    accepted = 0

    async def run() -> None:
        nonlocal accepted

        async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal accepted
            accepted += 1
            try:
                while True:
                    await read_request(reader)
                    writer.write(reply(b'{"tls":true}'))
            except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
                pass
            finally:
                writer.close()

        server = await asyncio.start_server(on_connect, "127.0.0.1", 0, ssl=server_side)
        port = server.sockets[0].getsockname()[1]
        async with server:
            trusted = Pool(
                connect_timeout_s=2.0,
                read_timeout_s=5.0,
                ssl_context=ssl.create_default_context(cafile=str(cert)),
            )
            for _ in range(2):
                response = await trusted.post(f"https://127.0.0.1:{port}/x", b"", {})
                assert await response.read() == b'{"tls":true}'
            await trusted.close()
            # the system's CA store does not know this certificate
            with pytest.raises(UpstreamError, match="CERTIFICATE_VERIFY_FAILED"):
                await pool().post(f"https://127.0.0.1:{port}/x", b"", {})

    asyncio.run(run())
    assert accepted == 1  # one kept-alive connection (the refused one never got past TLS)
