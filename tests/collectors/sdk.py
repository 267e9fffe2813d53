"""Gateway-shaped spans emitted through the real OpenTelemetry SDK."""

from __future__ import annotations

import uuid

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from gate.telemetry import attributes as a
from tests.collectors.factory import Ids, route_attributes

RESOURCE = Resource.create({"service.name": "specgate-gateway"})


def record_requests(ids: Ids, count: int) -> list[ReadableSpan]:
    """Emit `count` sampled requests (pair span and two route calls each); return the spans."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=RESOURCE)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("specgate.gateway")
    for _ in range(count):
        pair_id, request_id = uuid.uuid4(), uuid.uuid4()
        pair_attributes = {
            a.PAIR_ID: str(pair_id),
            a.REQUEST_ID: str(request_id),
            a.ROLLOUT_ID: ids.rollout,
            a.SEGMENT: "code",
            a.PAIR_IS_CONTROL: False,
        }
        with tracer.start_as_current_span(
            a.PAIR_SPAN_NAME, kind=SpanKind.INTERNAL, attributes=pair_attributes
        ):
            for cohort in ("baseline", "candidate"):
                attributes = route_attributes(ids, cohort, pair_id, request_id)
                with tracer.start_as_current_span(
                    "chat llama", kind=SpanKind.CLIENT, attributes=attributes
                ):
                    pass
    provider.shutdown()
    return list(memory.get_finished_spans())
