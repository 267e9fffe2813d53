"""A minimal asyncio HTTP/1.1 load generator for SSE endpoints (keep-alive, chunked).

It measures, per request, the time to the first body chunk (TTFT as a client sees it)
and to the end of the stream. Written on raw sockets so its own cost stays small and
equal for every target.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field


@dataclass
class Sample:
    ttft_s: float
    e2e_s: float
    ok: bool


@dataclass
class RunResult:
    samples: list[Sample] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def ok(self) -> list[Sample]:
        return [s for s in self.samples if s.ok]


async def _read_response(reader: asyncio.StreamReader, started: float) -> Sample:
    status_line = await reader.readline()
    ok = b" 200 " in status_line
    chunked, length = False, None
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.decode("latin-1").partition(":")
        name = name.strip().lower()
        if name == "transfer-encoding" and "chunked" in value:
            chunked = True
        elif name == "content-length":
            length = int(value.strip())
    first: float | None = None
    if chunked:
        while True:
            size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                await reader.readline()
                break
            await reader.readexactly(size + 2)
            if first is None:
                first = time.perf_counter()
    elif length:
        await reader.readexactly(length)
        first = time.perf_counter()
    end = time.perf_counter()
    return Sample((first or end) - started, end - started, ok)


async def _stream_worker(
    host: str, port: int, request: bytes, count: int, out: list[Sample]
) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        for _ in range(count):
            started = time.perf_counter()
            writer.write(request)
            await writer.drain()
            out.append(await _read_response(reader, started))
    finally:
        writer.close()


def build_request(host: str, port: int, path: str, body: bytes, headers: dict[str, str]) -> bytes:
    """Return the raw bytes of one keep-alive POST."""
    lines = [
        f"POST {path} HTTP/1.1",
        f"Host: {host}:{port}",
        "Connection: keep-alive",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
    ]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def run(host: str, port: int, request: bytes, *, streams: int, per_stream: int) -> RunResult:
    """Run `streams` concurrent keep-alive streams of `per_stream` sequential requests."""
    samples: list[Sample] = []
    started = time.perf_counter()
    await asyncio.gather(
        *(_stream_worker(host, port, request, per_stream, samples) for _ in range(streams))
    )
    return RunResult(samples, time.perf_counter() - started)
