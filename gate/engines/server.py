"""The local engines' OpenAI-compatible API over one backend, with vLLM-shaped `/metrics`.

As many requests run at once as the backend has slots (one by default: a small model on one
core gains little from batching; llama.cpp's `--parallel` decodes several in one batch); the
others wait, and that wait shows as queue time and in TTFT, as in vLLM. Generation runs in
a worker thread owned by a task of its own, so a client that leaves never frees the engine
while the backend is still busy: the backend sees `emit` return False and stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from gate.engines.base import Backend, Emit, GenerationResult, GenRequest, parse_request
from gate.engines.metrics import CONTENT_TYPE, EngineMetrics, Finished
from gate.engines.responses import Envelope, Timing, error_body, sse
from gate.engines.tools import ToolSniffer, tool_names, tool_request
from gate.errors import BadRequest, GateError

log = logging.getLogger("specgate.engine")
Sink = Callable[[dict[str, Any]], object]


class EngineService:
    """Runs requests on one backend, up to its slots at a time, and keeps its metrics."""

    def __init__(self, backend: Backend, *, model: str, default_max_tokens: int = 512) -> None:
        self.backend = backend
        self.model = model
        self.default_max_tokens = default_max_tokens
        k = backend.spec.num_speculative_tokens if backend.spec else 0
        self.metrics = EngineMetrics(
            model, spec_tokens=k, backend=backend.name, cache_usage=backend.cache.share
        )
        self._slots = asyncio.Semaphore(backend.slots)
        self._tasks: set[asyncio.Task[GenerationResult]] = set()

    async def submit(self, request: GenRequest, timing: Timing, emit: Emit) -> GenerationResult:
        """Run one request to its end, even when the caller is cancelled meanwhile."""
        task = asyncio.create_task(self._run(request, timing, emit))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return await asyncio.shield(task)

    async def _run(self, request: GenRequest, timing: Timing, emit: Emit) -> GenerationResult:
        outcome = GenerationResult(finish_reason="error")
        self.metrics.waiting.inc()
        try:
            async with self._slots:
                self.metrics.waiting.dec()
                timing.started = time.perf_counter()
                self.metrics.running.inc()
                try:
                    outcome = await asyncio.to_thread(self._generate, request, emit)
                finally:
                    self.metrics.running.dec()
        finally:
            if timing.started is None:
                self.metrics.waiting.dec()
            timing.ended = time.perf_counter()
            self.metrics.observe(_finished(outcome, timing))
        return outcome

    def _generate(self, request: GenRequest, emit: Emit) -> GenerationResult:
        names = tool_names(request)
        if not names:
            return self.backend.generate(request, emit)
        sniffer = ToolSniffer(emit, names)
        outcome = self.backend.generate(tool_request(request), sniffer)
        call = sniffer.finish(outcome.text)
        if call is not None:
            outcome.tool_calls, outcome.text, outcome.finish_reason = [call], "", "tool_calls"
        return outcome

    async def answer(self, request: GenRequest, timing: Timing) -> dict[str, Any]:
        """Return the whole (non-streamed) response body."""
        cancelled = threading.Event()
        try:
            outcome = await self.submit(request, timing, _emitter(timing, None, cancelled))
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return Envelope.new(request, self.model).whole(outcome, timing)

    async def stream(self, request: GenRequest, timing: Timing) -> AsyncIterator[bytes]:
        """Yield the SSE chunks of a streamed response."""
        envelope = Envelope.new(request, self.model)
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        cancelled = threading.Event()
        emit = _emitter(timing, lambda d: loop.call_soon_threadsafe(queue.put_nowait, d), cancelled)
        task = asyncio.ensure_future(self.submit(request, timing, emit))
        task.add_done_callback(lambda _: queue.put_nowait(None))
        try:
            if request.chat:
                yield envelope.delta({"role": "assistant", "content": ""})
            while (delta := await queue.get()) is not None:
                yield envelope.delta(delta)
            if task.exception() is not None:
                yield sse({"error": {"message": str(task.exception()), "type": "internal_error"}})
            else:
                outcome = task.result()
                yield envelope.delta({}, outcome.finish_reason)
                if request.include_usage:
                    yield envelope.usage_chunk(outcome, timing)
            yield b"data: [DONE]\n\n"
        finally:
            cancelled.set()  # the client left (or we are done): stop the backend


def _emitter(timing: Timing, sink: Sink | None, cancelled: threading.Event) -> Emit:
    def emit(delta: dict[str, Any]) -> bool:
        if timing.first_token is None:
            timing.first_token = time.perf_counter()
        if sink is not None and delta:
            sink(delta)
        return not cancelled.is_set()

    return emit


def _finished(outcome: GenerationResult, timing: Timing) -> Finished:
    return Finished(
        finish_reason=outcome.finish_reason,
        prompt_tokens=outcome.prompt_tokens,
        completion_tokens=outcome.completion_tokens,
        e2e_s=timing.e2e_s,
        queue_s=timing.queue_s,
        ttft_s=timing.ttft_s,
        spec=outcome.spec,
    )


def create_engine_app(load: Callable[[], Backend], *, model: str) -> Starlette:
    """Build the engine's ASGI app; the backend is loaded at startup, in a worker thread."""
    state: dict[str, EngineService] = {}

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        state["service"] = EngineService(await asyncio.to_thread(load), model=model)
        yield

    async def completion(request: Request) -> Response:
        timing = Timing()
        service = state["service"]
        try:
            body = orjson.loads(await request.body())
            if not isinstance(body, dict):
                raise BadRequest("the body must be a JSON object")
            chat = request.url.path.endswith("/chat/completions")
            parsed = parse_request(body, chat=chat, default_max_tokens=service.default_max_tokens)
        except orjson.JSONDecodeError:
            return _error(400, "invalid JSON")
        except BadRequest as exc:
            return _error(400, exc.message)
        if parsed.stream:
            return StreamingResponse(service.stream(parsed, timing), media_type="text/event-stream")
        try:
            answer = await service.answer(parsed, timing)
        except GateError as exc:
            return _error(exc.status_code, exc.message)
        except Exception as exc:
            log.exception("engine_request_failed")
            return _error(500, f"generation failed: {exc}")
        return Response(orjson.dumps(answer), media_type="application/json")

    async def models(_request: Request) -> Response:
        card = {"id": model, "object": "model", "created": 0, "owned_by": "specgate"}
        return Response(orjson.dumps({"object": "list", "data": [card]}), media_type=_JSON)

    async def metrics(_request: Request) -> Response:
        return Response(state["service"].metrics.render(), media_type=CONTENT_TYPE)

    async def health(_request: Request) -> Response:
        return Response(b'{"status":"ok"}', media_type=_JSON)

    return Starlette(
        routes=[
            Route("/v1/chat/completions", completion, methods=["POST"]),
            Route("/v1/completions", completion, methods=["POST"]),
            Route("/v1/models", models),
            Route("/metrics", metrics),
            Route("/health", health),
        ],
        lifespan=lifespan,
    )


_JSON = "application/json"


def _error(status: int, message: str) -> Response:
    return Response(error_body(status, message), status_code=status, media_type=_JSON)
