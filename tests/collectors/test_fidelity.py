"""Facts arrive as sent: every gzip member, doubles as doubles, NUL counted, any-case bearer."""

from __future__ import annotations

import gzip

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from prometheus_client import CollectorRegistry
from sqlalchemy import Engine, select

from collectors.app import create_app
from collectors.spans import NUL_REMOVED
from gate.db.models import Generation, SpanRecord
from gate.settings import load_settings
from gate.telemetry import attributes as a
from tests.collectors.factory import gateway_spans
from tests.collectors.sdk import record_requests
from tests.collectors.test_acknowledge import keys_of, stored_keys
from tests.collectors.test_writer import start
from tests.servers import serving

pytestmark = pytest.mark.postgres
GZIP_PROTOBUF = {"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"}


def attributes_of(engine: Engine, span_id: str) -> dict:
    with engine.connect() as connection:
        query = select(SpanRecord.attributes).where(SpanRecord.span_id == span_id)
        return connection.execute(query).scalar_one()


def test_a_multi_member_gzip_body_lands_whole_and_a_lower_case_bearer_is_let_in(
    pg_url, pg_engine, pg_ids, tmp_path
):
    settings = load_settings(database_url=pg_url, home=tmp_path)
    app = create_app(settings, load_settings(collector_token="s3cret"))
    first, second = record_requests(pg_ids, 1), record_requests(pg_ids, 1)
    members = [gzip.compress(encode_spans(spans).SerializeToString()) for spans in (first, second)]
    headers = {**GZIP_PROTOBUF, "Authorization": "bearer s3cret"}
    with serving(app) as base:
        response = httpx.post(f"{base}/v1/traces", content=b"".join(members), headers=headers)
        garbage = httpx.post(f"{base}/v1/traces", content=members[0] + b"\0\0", headers=headers)
    assert response.status_code == 200 and garbage.status_code == 400
    assert stored_keys(pg_engine) == keys_of(first) | keys_of(second)


def test_doubles_of_1e16_and_more_come_back_from_jsonb_as_doubles(
    pg_url, pg_engine, pg_ids, tmp_path
):
    pipeline = start(pg_url, tmp_path, CollectorRegistry())
    spans = gateway_spans(pg_ids)
    numbers = {"big": 1e16, "bigger": -2.5e17, "huge": 1.5e300, "small": 1e15, "tiny": 1e-7}
    spans[0].attributes["app.numbers"] = list(numbers.values())
    spans[0].attributes |= {f"app.{name}": value for name, value in numbers.items()}
    spans[0].attributes["app.integer"] = 10**16
    pipeline.writer.enqueue(spans)
    assert pipeline.writer.flush(10)
    pipeline.close()
    stored = attributes_of(pg_engine, spans[0].span_id)
    assert stored["app.numbers"] == list(numbers.values())
    assert all(type(item) is float for item in stored["app.numbers"])
    for name, value in numbers.items():
        assert type(stored[f"app.{name}"]) is float and stored[f"app.{name}"] == value
    assert type(stored["app.integer"]) is int


def test_nul_characters_are_counted_on_the_span_and_the_generation_still_lands(
    pg_url, pg_engine, pg_ids, tmp_path
):
    registry = CollectorRegistry()
    pipeline = start(pg_url, tmp_path, registry)
    spans = gateway_spans(pg_ids)
    baseline = spans[1]
    baseline.attributes[a.OUTPUT] = "a\x00b\x00c"
    baseline.attributes["app.note"] = "x\x00"
    pipeline.writer.enqueue(spans)
    assert pipeline.writer.flush(10)
    pipeline.close()
    assert attributes_of(pg_engine, baseline.span_id)[NUL_REMOVED] == 3
    with pg_engine.connect() as connection:
        outputs = connection.execute(
            select(Generation.output).where(Generation.span_id == baseline.span_id)
        ).scalars()
        assert list(outputs) == ["abc"]
    assert registry.get_sample_value("specgate_collector_nul_removed_total") == 3
    assert registry.get_sample_value("specgate_collector_normalise_failed_total") == 0
