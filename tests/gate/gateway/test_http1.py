"""The gateway's HTTP/1.1 client against scripted servers on 127.0.0.1: what only this
client does (connection replacement, bodies ending with the connection, its error wording,
its back-pressure bound, interim answers, idle timeout, TLS). What every route client keeps
(keep-alive, timeouts, retries, headers) is in test_transport.py, run for both."""

from __future__ import annotations

import asyncio
import os
import shutil
import ssl
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from gate.gateway.http1 import HIGH_WATER_BYTES, Pool, UpstreamError

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


def test_connections_idle_past_the_idle_timeout_are_not_reused():
    handler = answering(reply(b"{}"), every=True)

    async def work(base: str) -> None:
        client = pool(idle_timeout_s=0.2)
        for pause in (0.0, 0.4, 0.0):  # reused, replaced, reused
            await asyncio.sleep(pause)
            assert await (await client.post(f"{base}/x", b"", {})).read() == b"{}"
        await client.close()

    assert asyncio.run(serving(handler, work)) == 2


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
