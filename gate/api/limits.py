"""One request-size limit for the control API, enforced before any endpoint reads a body."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gate.api.problems import problem


class BodyLimit:
    """Refuse a request body over `max_bytes` with a 413 problem document.

    Control bodies are small, so the body is read here (never more than `max_bytes` + one
    chunk) and replayed to the app; a declared or chunked body alike is caught.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, or answer 413."""
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        too_large = declared.isdigit() and int(declared) > self.max_bytes
        messages = [] if too_large else await self._read(receive)
        if too_large or messages is None:
            await self._refuse(scope, receive, send)
            return
        replay = iter(messages)

        async def replayed() -> Message:
            return next(replay, None) or await receive()

        await self.app(scope, replayed, send)

    async def _read(self, receive: Receive) -> list[Message] | None:
        messages, size = [], 0
        while True:
            message = await receive()
            messages.append(message)
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                return None
            if message["type"] != "http.request" or not message.get("more_body"):
                return messages

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        detail = f"the request body is over the control API's limit of {self.max_bytes} bytes"
        response = problem(413, "payload too large", detail, "payload_too_large")
        # The rest of the body is never read: close the connection rather than drain it.
        response.headers["connection"] = "close"
        await response(scope, receive, send)
