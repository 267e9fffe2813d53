"""vLLM's span joins its generation whichever exporter's batch commits first, even at once."""

from __future__ import annotations

import threading
import uuid

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Tracer
from sqlalchemy import Engine, func, select

from collectors.app import create_app
from gate.db.models import Generation, SpanRecord
from gate.settings import load_settings
from gate.telemetry import attributes as a
from tests.collectors.factory import Ids, route_attributes
from tests.servers import serving
from tests.waits import wait_until

pytestmark = pytest.mark.postgres

TRACES = 150
# The gateway's span lacks what vLLM's span knows: token counts (no usage on the stream)
# and the time in queue.
_GATEWAY_LACKS = (a.GEN_AI_USAGE_INPUT_TOKENS, a.GEN_AI_USAGE_OUTPUT_TOKENS)


def _provider(service: str) -> tuple[TracerProvider, InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    return provider, memory


def record_traces(ids: Ids, count: int) -> list[tuple[list[ReadableSpan], list[ReadableSpan]]]:
    """Emit `count` requests; return each one's gateway spans and vLLM's `llm_request`."""
    gateway, gateway_memory = _provider("specgate-gateway")
    vllm, vllm_memory = _provider("vllm")
    gateway_tracer, vllm_tracer = gateway.get_tracer("gateway"), vllm.get_tracer("vllm")
    traces = []
    for index in range(count):
        pair_id, request_id = uuid.uuid4(), uuid.uuid4()
        pair: dict[str, str | int] = {
            a.PAIR_ID: str(pair_id),
            a.REQUEST_ID: str(request_id),
            a.ROLLOUT_ID: ids.rollout,
        }
        with gateway_tracer.start_as_current_span(a.PAIR_SPAN_NAME, attributes=pair):
            for cohort in ("baseline", "candidate"):
                attributes = route_attributes(ids, cohort, pair_id, request_id)
                for key in _GATEWAY_LACKS:
                    del attributes[key]
                with gateway_tracer.start_as_current_span(
                    "chat llama", kind=SpanKind.CLIENT, attributes=attributes
                ):
                    _serve(vllm_tracer, index)
        traces.append((gateway_memory.get_finished_spans(), vllm_memory.get_finished_spans()))
        gateway_memory.clear()
        vllm_memory.clear()
    gateway.shutdown()
    vllm.shutdown()
    return [(list(g), list(v)) for g, v in traces]


def _serve(tracer: Tracer, index: int) -> None:
    """Record vLLM's span, continuing the trace from the call's propagated context."""
    attributes = {
        a.VLLM_QUEUE: 0.004,
        a.VLLM_PROMPT_TOKENS: 1000 + index,
        a.VLLM_COMPLETION_TOKENS: 100,
    }
    with tracer.start_as_current_span(
        a.VLLM_SPAN_NAME, kind=SpanKind.SERVER, attributes=attributes
    ):
        pass


def _post_in_step(exporter: OTLPSpanExporter, batches: list[list[ReadableSpan]],
                  barrier: threading.Barrier, results: list[SpanExportResult]) -> None:  # fmt: skip
    for spans in batches:
        barrier.wait(timeout=30)  # both exporters post the same trace at the same moment
        results.append(exporter.export(spans))


def _count(engine: Engine, *where: object) -> int:
    with engine.connect() as conn:
        query = select(func.count()).select_from(Generation).where(*where)  # type: ignore[arg-type]
        return int(conn.execute(query).scalar_one())


def _spans(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(SpanRecord)).scalar_one())


def test_vllm_spans_join_their_generations_when_both_exporters_post_at_once(
    pg_url: str, pg_engine: Engine, pg_ids: Ids, tmp_path: object
) -> None:
    settings = load_settings(database_url=pg_url, home=tmp_path)
    collector = load_settings(collector_flush_interval_s=0.01, collector_writer_threads=2)
    traces = record_traces(pg_ids, TRACES)
    barrier = threading.Barrier(2)
    results: list[SpanExportResult] = []
    with serving(create_app(settings, collector)) as base_url:
        exporters = [OTLPSpanExporter(endpoint=f"{base_url}/v1/traces") for _ in range(2)]
        threads = [
            threading.Thread(
                target=_post_in_step, args=(exporter, [t[side] for t in traces], barrier, results)
            )
            for side, exporter in enumerate(exporters)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert results == [SpanExportResult.SUCCESS] * (2 * TRACES)
        # Durable acknowledgement: every span is stored once its export returned.
        assert _spans(pg_engine) == 5 * TRACES
        joined = (Generation.queue_s.is_not(None), Generation.input_tokens >= 1000)
        every_one = wait_until(lambda: _count(pg_engine, *joined) == 2 * TRACES, timeout=10)
        assert every_one, f"{2 * TRACES - _count(pg_engine, *joined)} vLLM spans left unjoined"
        for exporter in exporters:
            exporter.shutdown()
    assert _count(pg_engine, Generation.output_tokens == 100) == 2 * TRACES
