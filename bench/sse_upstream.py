"""A lean OpenAI-style streaming upstream for the gateway benchmark (raw asyncio, HTTP/1.1).

`specgate engine --model sim` is a Starlette app: at 64 concurrent streams on one shared
core it becomes the bottleneck itself, and "direct" then measures the upstream's queue,
not a fast upstream. This server does the least an upstream must: it reads a request
(Content-Length bodies, keep-alive), waits the time to first token, then writes each
chunk as its own chunked-encoding frame and write, the usage chunk when asked for, and
`[DONE]`. Chunks are pre-encoded; only the usage line is built per request.

    python bench/sse_upstream.py PORT [--ttft-ms 20] [--tokens 32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

MODEL = "sim"


def frame(payload: bytes) -> bytes:
    """Return one chunked-transfer frame holding `payload`."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def sse(document: dict[str, object]) -> bytes:
    return b"data: " + json.dumps(document, separators=(",", ":")).encode() + b"\n\n"


class Upstream(asyncio.Protocol):
    """One client connection; requests on it are answered in order."""

    def __init__(self, ttft_s: float, chunks: list[bytes]) -> None:
        self.ttft_s, self.chunks = ttft_s, chunks
        self.buffer = b""
        self.transport: asyncio.Transport | None = None
        self.busy = False
        self.queue: list[tuple[str, bytes]] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) != -1:
            head = self.buffer[:end].decode("latin-1").split("\r\n")
            length = 0
            for line in head[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            if len(self.buffer) < end + 4 + length:
                return
            body = self.buffer[end + 4 : end + 4 + length]
            self.buffer = self.buffer[end + 4 + length :]
            self.queue.append((head[0], body))
        if self.queue and not self.busy:
            self.busy = True
            asyncio.get_running_loop().create_task(self.serve())

    async def serve(self) -> None:
        while self.queue and self.transport is not None:
            line, body = self.queue.pop(0)
            if line.startswith("GET /v1/models"):
                models = {"object": "list", "data": [{"id": MODEL, "object": "model"}]}
                self.reply(json.dumps(models).encode())
                continue
            request = json.loads(body or b"{}")
            await asyncio.sleep(self.ttft_s)
            if self.transport is None:
                break
            if not request.get("stream"):
                self.reply(self.whole())
                continue
            self.transport.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"transfer-encoding: chunked\r\n\r\n"
            )
            for chunk in self.chunks:
                self.transport.write(chunk)
            options = request.get("stream_options") or {}
            if options.get("include_usage"):
                tokens = len(self.chunks)
                usage = {"prompt_tokens": 12, "completion_tokens": tokens,
                         "total_tokens": 12 + tokens}  # fmt: skip
                final = {"id": "b", "object": "chat.completion.chunk", "created": int(time.time()),
                         "model": MODEL, "choices": [], "usage": usage}  # fmt: skip
                self.transport.write(frame(sse(final)))
            self.transport.write(frame(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        self.busy = False

    def whole(self) -> bytes:
        tokens = len(self.chunks)
        answer = {
            "id": "b",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": MODEL,
            "usage": {
                "prompt_tokens": 12,
                "completion_tokens": tokens,
                "total_tokens": 12 + tokens,
            },
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "length",
                    "message": {"role": "assistant", "content": "word " * tokens},
                }
            ],
        }
        return json.dumps(answer).encode()

    def reply(self, body: bytes) -> None:
        assert self.transport is not None
        self.transport.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n%s" % (len(body), body)
        )


def chunks(tokens: int) -> list[bytes]:
    """Pre-encode the content chunks: role on the first, finish reason on the last."""
    out = []
    for i in range(tokens):
        delta = {"content": f"w{i} "} if i else {"role": "assistant", "content": "w0 "}
        choice = {
            "index": 0,
            "delta": delta,
            "finish_reason": "length" if i == tokens - 1 else None,
        }
        out.append(frame(sse({"id": "b", "object": "chat.completion.chunk", "created": 0,
                              "model": MODEL, "choices": [choice]})))  # fmt: skip
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("port", type=int)
    parser.add_argument("--ttft-ms", type=float, default=20.0)
    parser.add_argument("--tokens", type=int, default=32)
    args = parser.parse_args()
    encoded = chunks(args.tokens)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: Upstream(args.ttft_ms / 1000, encoded), "127.0.0.1", args.port, backlog=1024
    )
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        import uvloop  # what uvicorn uses too, when installed
    except ImportError:
        asyncio.run(main())
    else:
        uvloop.run(main())
