"""Network-edge helpers for tests: ASGI apps on 127.0.0.1 ephemeral ports in background
threads, free ports, and a TCP proxy that can cut a connection (a database or Redis "outage")."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route


@contextmanager
def serving(app: Any) -> Iterator[str]:
    """Serve `app` until the block ends; yield its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app, log_level="warning", lifespan="on", loop="asyncio", timeout_graceful_shutdown=1
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("test server did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def span_sink() -> Starlette:
    """An OTLP/HTTP endpoint that accepts every export and keeps nothing."""

    async def accept(_request: Request) -> Response:
        return Response(b"", media_type="application/x-protobuf")

    return Starlette(routes=[Route("/v1/traces", accept, methods=["POST"])])


def closed_port() -> int:
    """Return a port on 127.0.0.1 that nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class TcpProxy:
    """Forwards 127.0.0.1:<port> to a target; `cut` drops every connection until `restore`;
    `stall` holds every byte (connections stay open, nothing answers) until `restore`;
    `hold(pattern)` holds, from the first chunk a client sends that contains `pattern`, what
    clients send (answers still flow) until `restore`, setting `holding` once it does.
    `accepted` counts the connections it took (`listen_port` picks its own port)."""

    def __init__(self, host: str, port: int, *, listen_port: int = 0) -> None:
        self.target = (host, port)
        self.listener = socket.create_server(("127.0.0.1", listen_port))
        self.port = self.listener.getsockname()[1]
        self.accepted = 0
        self._open = True
        self._flowing = threading.Event()
        self._flowing.set()
        self._held: bytes | None = None
        self._sending = threading.Event()
        self._sending.set()
        self.holding = threading.Event()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self) -> None:
        with self._lock:
            self._open = False
            for sock in self._sockets:
                with suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._sockets.clear()

    def stall(self) -> None:
        self._flowing.clear()

    def hold(self, pattern: bytes) -> None:
        self._held = pattern

    def restore(self) -> None:
        with self._lock:
            self._open = True
        self._held = None
        self._flowing.set()
        self._sending.set()

    def close(self) -> None:
        self.cut()
        self._flowing.set()  # stalled pumps meet their closed sockets and end
        self._sending.set()
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self._lock:
                self.accepted += 1
                if not self._open:
                    client.close()  # the database "is down": connections die at once
                    continue
                try:
                    upstream = socket.create_connection(self.target)
                except OSError:
                    client.close()
                    continue
                for sock in (client, upstream):  # no Nagle delays on the database's round trips
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self._sockets += [client, upstream]
            for source, sink, sent in ((client, upstream, True), (upstream, client, False)):
                args = (source, sink, sent)
                threading.Thread(target=self._pump, args=args, daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, sent: bool) -> None:
        with suppress(OSError):
            while data := source.recv(65536):
                if sent and self._held is not None and self._held in data:
                    self._sending.clear()
                    self.holding.set()
                if sent:
                    self._sending.wait()
                self._flowing.wait()
                sink.sendall(data)
        for sock in (source, sink):
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def control_api(services: Any) -> Any:
    """Return the control API alone, as the gateway mounts it (OpenAPI at /docs)."""
    from fastapi import FastAPI

    from gate.api.app import install_control_api

    app = FastAPI(title="specgate control API", version="1")
    install_control_api(app, services)
    return app
