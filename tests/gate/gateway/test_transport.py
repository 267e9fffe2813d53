"""The `Transport` contract, which both route clients (http1, httpx) keep, against scripted
servers on 127.0.0.1: keep-alive, timeouts, broken answers, back-pressure, abandoned calls,
headers; and the setting that picks the client."""

from __future__ import annotations

import asyncio
import logging
import socket

import pytest

from gate.gateway.http1 import HIGH_WATER_BYTES, RETRY_WINDOW_S, Pool
from gate.gateway.httpx_transport import HttpxTransport
from gate.gateway.transport import (
    TRANSPORTS,
    ConnectTimeout,
    Transport,
    Unreachable,
    UpstreamError,
)
from gate.gateway.transport_factory import create_transport
from gate.settings import Settings
from tests.gate.gateway.test_http1 import answering, chunk, read_request, reply, serving


@pytest.fixture(params=TRANSPORTS)
def make(request: pytest.FixtureRequest):
    def build(*, connect_timeout_s: float = 2.0, read_timeout_s: float = 5.0) -> Transport:
        return create_transport(
            request.param, connect_timeout_s=connect_timeout_s, read_timeout_s=read_timeout_s
        )

    return build


def test_the_setting_picks_the_client(monkeypatch, tmp_path):
    assert Settings(home=tmp_path).upstream_transport == "http1"
    monkeypatch.setenv("SPECGATE_UPSTREAM_TRANSPORT", "httpx")
    assert Settings(home=tmp_path).upstream_transport == "httpx"
    monkeypatch.setenv("SPECGATE_UPSTREAM_TRANSPORT", "curl")
    with pytest.raises(ValueError, match="upstream_transport"):
        Settings(home=tmp_path)
    kinds = {
        name: create_transport(name, connect_timeout_s=1, read_timeout_s=1) for name in TRANSPORTS
    }
    assert {name: type(client) for name, client in kinds.items()} == {
        "http1": Pool,
        "httpx": HttpxTransport,
    }
    for client in kinds.values():
        asyncio.run(client.close())


def test_posts_reuse_one_keep_alive_connection_and_send_only_what_they_are_given(make):
    heads: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head, body = await read_request(reader)
            heads.append(head)
            writer.write(reply(body))
            await writer.drain()

    async def work(base: str) -> None:
        client = make()
        for i in range(3):
            response = await client.post(f"{base}/v1/x", b"{%d}" % i, {"authorization": "k"})
            assert (response.status, await response.read()) == (200, b"{%d}" % i)
            assert response.headers["content-type"] == "application/json"
        await client.close()

    assert asyncio.run(serving(handler, work)) == 1
    names = {line.split(b":")[0].lower() for line in heads[0].split(b"\r\n")[1:] if line}
    assert heads[0].startswith(b"POST /v1/x HTTP/1.1\r\n")
    assert names == {b"host", b"content-length", b"authorization"}


def test_an_answer_streams_as_it_is_written(make):
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + chunk(b"one"))
        await writer.drain()
        await reader.read()  # until the client hangs up
        writer.write(chunk(b"two") + b"0\r\n\r\n")

    async def work(base: str) -> None:
        client = make()
        response = await client.post(f"{base}/x", b"", {})
        chunks = response.chunks()
        assert await anext(chunks) == b"one"
        assert not response.at_end
        response.close()  # abandoned: the connection closes, the upstream stops
        await client.close()

    asyncio.run(serving(handler, work))


def test_the_end_that_comes_with_the_last_bytes_is_known_when_they_are_handed_out(make):
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + chunk(b"ab"))
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(chunk(b"cd") + b"0\r\n\r\n")  # the last bytes and the end, at once
        await reader.read()

    async def work(base: str) -> None:
        client = make()
        response = await client.post(f"{base}/x", b"", {})
        seen = [(data, response.at_end) async for data in response.chunks()]
        assert seen == [(b"ab", False), (b"cd", True)]
        response.release()
        await client.close()

    asyncio.run(serving(handler, work))


def test_no_answer_within_the_read_timeout(make):
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await reader.read()

    async def work(base: str) -> None:
        client = make(read_timeout_s=0.3)
        with pytest.raises(TimeoutError) as raised:
            await client.post(f"{base}/x", b"", {})
        assert not isinstance(raised.value, ConnectTimeout)
        await client.close()

    asyncio.run(serving(handler, work))


def test_a_stream_that_stalls_times_out_and_an_abandoned_one_is_closed(make):
    async def run() -> None:
        gone = asyncio.Event()

        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + chunk(b"a"))
            await reader.read()  # EOF: the client closed the connection
            gone.set()

        async def work(base: str) -> None:
            client = make(read_timeout_s=0.3)
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
    "answer",
    [
        b"<html>502 bad gateway</html>\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nab",
        b"",
    ],
    ids=["not-http", "cut-mid-body", "closed-at-once"],
)
def test_broken_answers_are_upstream_errors(make, answer):
    async def work(base: str) -> None:
        client = make()
        with pytest.raises(UpstreamError):
            response = await client.post(f"{base}/x", b"", {})
            await response.read()
        await client.close()

    asyncio.run(serving(answering(answer), work))


def test_a_reused_connection_the_upstream_closes_as_the_request_goes_is_retried_once(make):
    # The upstream (uvicorn's keep-alive, a restarting engine) hangs up on a kept-alive
    # connection just as the next request is written: nothing was answered, so the
    # request goes again on a new connection, whichever client the gateway runs.
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(reply(b"{}"))
        await read_request(reader)  # the second request on this connection: hang up

    async def work(base: str) -> None:
        client = make()
        for _ in range(3):
            assert await (await client.post(f"{base}/x", b"", {})).read() == b"{}"
        await client.close()

    # first call: connection 1; second: 1 dies unanswered, 2 answers; third: 2 dies, 3
    assert asyncio.run(serving(handler, work)) == 3


def test_a_reused_connection_that_dies_late_is_not_retried(make):
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(reply(b"{}"))
        await read_request(reader)
        await asyncio.sleep(RETRY_WINDOW_S + 0.3)  # "generating", then the upstream dies

    async def work(base: str) -> None:
        client = make()
        assert await (await client.post(f"{base}/x", b"", {})).read() == b"{}"
        with pytest.raises(UpstreamError):
            await client.post(f"{base}/x", b"", {})
        await client.close()

    assert asyncio.run(serving(handler, work)) == 1


def test_a_new_connection_that_dies_unanswered_is_not_retried(make):
    async def work(base: str) -> None:
        client = make()
        with pytest.raises(UpstreamError):
            await client.post(f"{base}/x", b"", {})
        await client.close()

    assert asyncio.run(serving(answering(b""), work)) == 1


def test_an_unreachable_route_is_unreachable(make):
    async def run() -> None:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        with pytest.raises(Unreachable, match="cannot connect"):
            await make().post(f"http://127.0.0.1:{port}/x", b"", {})

    asyncio.run(run())


def test_a_connect_timeout_is_a_connect_timeout(make):
    async def run() -> None:
        with socket.socket() as listener:  # a full accept queue: further SYNs are dropped
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
            with pytest.raises(ConnectTimeout, match="no connection"):
                await make(connect_timeout_s=0.3).post(f"http://127.0.0.1:{port}/x", b"", {})
            for filler in fillers:
                filler.close()

    asyncio.run(run())


def test_a_slow_reader_loses_nothing(make):
    body = bytes(range(256)) * (8 * HIGH_WATER_BYTES // 256)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body))
        for i in range(0, len(body), 16384):
            writer.write(body[i : i + 16384])
            await writer.drain()

    async def work(base: str) -> None:
        client = make()
        response = await client.post(f"{base}/x", b"", {})
        got = []
        async for data in response.chunks():
            got.append(data)
            await asyncio.sleep(0.005)
        assert b"".join(got) == body
        response.release()
        await client.close()

    asyncio.run(serving(handler, work))


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({"tracestate": "a\r\nx-evil: 1"}, "line break"),
        ({"authorization": "Bearer s3cr€t"}, "outside Latin-1"),
    ],
    ids=["line-break", "not-latin-1"],
)
def test_headers_that_cannot_go_are_refused_without_their_value(make, headers, message):
    async def run() -> None:
        with pytest.raises(UpstreamError, match=message) as raised:
            await make().post("http://127.0.0.1:9/x", b"", headers)
        assert "s3cr" not in str(raised.value) and "evil" not in str(raised.value)

    asyncio.run(run())


def test_route_calls_log_nothing_at_info(make, caplog):
    async def work(base: str) -> None:
        client = make()
        for _ in range(3):
            assert await (await client.post(f"{base}/x", b"", {})).read() == b"{}"
        await client.close()

    with caplog.at_level("INFO"):
        asyncio.run(serving(answering(reply(b"{}"), every=True), work))
    assert [r.getMessage() for r in caplog.records if r.levelno < logging.WARNING] == []
