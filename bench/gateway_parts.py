"""CPU cost of the gateway's per-request parts, old way against new, on one core.

    python bench/gateway_parts.py [--spans 2048] [--requests 3000]

- OTLP encoding of gateway-shaped spans: the SDK's encoder against `SpanEncoder`;
- accounting for one streamed answer (32 content chunks, the usage chunk, `[DONE]`, as
  `bench/sse_upstream.py` writes them) arriving in one read: event by event (the fallback)
  against the whole read parsed in one call (the usual path);
- the cost of the logprobs the gateway asks for on sampled pairs: the same streamed answer
  carrying one log-probability per chunk, accounted for (with its summary) and stripped for
  the client, in one read and one event per read; a non-streamed 128-token chat answer
  carrying them, summarised and stripped. Calls that did not ask are never stripped;
- the sticky key of assignment (issue 39): the request body hashed whole (before) against
  the episode resolved at intake and hashed (now), on a 10-turn chat with a 2,000-character
  system prompt and on one short message, the episode from the conversation prefix (the
  fallback) or a header.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sse_upstream import chunks, sse

from gate.db.enums import GenerationStatus
from gate.gateway.logprobs import strip_events, strip_json, summarise
from gate.gateway.observe import CallResult
from gate.gateway.sampling import sticky_key, unit_hash
from gate.gateway.sse import event_data
from gate.gateway.upstream import Stream
from gate.request.episodes import EPISODE_HEADER, episode_of
from gate.telemetry.otlp_encode import SpanEncoder


def gateway_spans(count: int) -> list[ReadableSpan]:
    """Route-call spans with the gateway's attributes (start and outcome)."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "specgate-gateway"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("specgate.gateway")
    for i in range(count):
        start = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "vllm",
            "gen_ai.request.model": "llama",
            "specgate.cohort": "baseline",
            "specgate.route.id": 1,
            "specgate.route.name": "llama-base",
            "specgate.route.fingerprint": "3f2a9c41d0b7e655",
            "specgate.stream": True,
            "specgate.request.id": str(uuid.uuid4()),
            "specgate.segment": "chat",
            "specgate.mode": "shadow",
            "specgate.rollout.id": 1,
            "specgate.rollout.stage": 0,
        }
        outcome = {
            "specgate.status": "ok",
            "specgate.fallback": False,
            "specgate.ttft_s": 0.02 + i * 1e-6,
            "specgate.tpot_s": 0.0001,
            "specgate.e2e_s": 0.023,
            "specgate.itl_max_s": 0.0002,
            "gen_ai.usage.input_tokens": 12,
            "gen_ai.usage.output_tokens": 32,
            "gen_ai.response.id": f"chatcmpl-{i}",
            "gen_ai.response.model": "llama",
            "gen_ai.response.finish_reasons": ["length"],
        }
        span = tracer.start_span("chat llama", kind=SpanKind.CLIENT, attributes=start)
        span.set_attributes(outcome)
        span.end()
    return list(memory.get_finished_spans())


def per_call(work: Callable[[], Any], repeat: int) -> float:
    """Best of five timings of `repeat` calls, in µs per call."""
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(repeat):
            work()
        best = min(best, time.perf_counter() - started)
    return best / repeat * 1e6


class Arrived:
    """An answer that has fully arrived (Stream only asks whether it is at its end)."""

    at_end = True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=2048, help="spans per encoded batch")
    parser.add_argument("--requests", type=int, default=3000)
    args = parser.parse_args()

    spans = gateway_spans(args.spans)
    encoder = SpanEncoder()
    assert encoder.encode(spans) == encode_spans(spans).SerializePartialToString()
    sdk = per_call(lambda: encode_spans(spans).SerializePartialToString(), 1) / len(spans)
    lean = per_call(lambda: encoder.encode(spans), 1) / len(spans)
    print(f"OTLP encoding, µs per span: SDK {sdk:.1f}, lean {lean:.1f} ({sdk / lean:.1f}x)")

    usage = {"prompt_tokens": 12, "completion_tokens": 32, "total_tokens": 44}
    final = {"id": "b", "object": "chat.completion.chunk", "model": "sim", "choices": []}
    events = b"".join(c.split(b"\r\n")[1] for c in chunks(32))
    events += sse({**final, "usage": usage}) + b"data: [DONE]\n\n"

    def one_by_one() -> None:
        stream = Stream(Arrived(), CallResult(), capture=False)  # type: ignore[arg-type]
        now = time.perf_counter()
        for event in events[:-2].split(b"\n\n"):
            stream._observe(event_data(event), now)

    def in_one_call() -> None:
        stream = Stream(Arrived(), CallResult(), capture=False)  # type: ignore[arg-type]
        stream._complete(events, strip_usage=True)

    check = Stream(Arrived(), CallResult(), capture=False)  # type: ignore[arg-type]
    check._complete(events, strip_usage=True)
    assert check.result.content_chunks == 32 and check.result.output_tokens == 32
    assert check.result.status is GenerationStatus.OK and check.done
    slow = per_call(one_by_one, args.requests)
    fast = per_call(in_one_call, args.requests)
    print(
        f"accounting for one streamed answer (34 events), µs: event by event {slow:.0f}, "
        f"one read in one call {fast:.0f} ({slow / fast:.1f}x)"
    )
    stripping(events, args.requests)
    sticky_keys(args.requests)


def sticky_keys(requests: int) -> None:
    """Print the CPU cost of the key assignment hashes: whole body before, episode now."""
    messages = [{"role": "system", "content": "Answer briefly. " * 125}]
    messages.append({"role": "user", "content": "Plan a three-day trip to Lyon by train."})
    for turn in range(10):
        messages.append({"role": "assistant", "content": "Day one: the old town. " * 18})
        messages.append({"role": "user", "content": f"Turn {turn}: and the museums?"})
    short = [{"role": "user", "content": "Proofread: teh cat sat."}]
    header = {EPISODE_HEADER: "conversation-81"}
    for name, chat in (("10-turn chat", messages), ("one short message", short)):
        body = {"model": "m", "stream": True, "messages": chat}
        raw = orjson.dumps(body)
        before = per_call(lambda raw=raw: unit_hash(1, raw), requests)
        now = {
            label: per_call(lambda g=given, b=body, r=raw: _episode_key(g, b, r), requests)
            for label, given in (("prefix", {}), ("header", header))
        }
        print(
            f"sticky key, {name} ({len(raw) / 1000:.1f} kB), µs: whole body hashed "
            f"{before:.1f}; episode resolved and hashed: prefix {now['prefix']:.1f}, "
            f"header {now['header']:.1f}"
        )


def _episode_key(headers: dict[str, str], body: dict[str, Any], raw: bytes) -> float:
    return unit_hash(1, sticky_key(raw, episode_of(headers, body).id))


def with_logprobs(event: bytes, position: int) -> bytes:
    """A content chunk as a route writes it when asked for logprobs: one entry, no others."""
    chunk = orjson.loads(event[len(b"data: ") :])
    token = chunk["choices"][0]["delta"]["content"]
    entry = {"token": token, "logprob": -0.25 * (1 + position % 4), "bytes": list(token.encode())}
    chunk["choices"][0]["logprobs"] = {"content": [{**entry, "top_logprobs": []}]}
    return b"data: " + orjson.dumps(chunk)


def chat_answer(tokens: int) -> bytes:
    """A non-streamed chat answer carrying one log-probability per token."""
    entries = [
        {"token": f"w{i} ", "logprob": -0.25 * (1 + i % 4), "bytes": [119], "top_logprobs": []}
        for i in range(tokens)
    ]
    text = "".join(e["token"] for e in entries)
    choice = {"index": 0, "message": {"role": "assistant", "content": text}}
    usage = {"prompt_tokens": 12, "completion_tokens": tokens, "total_tokens": 12 + tokens}
    answer = {"id": "b", "choices": [{**choice, "logprobs": {"content": entries}}], "usage": usage}
    return orjson.dumps(answer)


def stripping(plain: bytes, requests: int) -> None:
    """Print what asking for logprobs costs the gateway per answer, streamed and not."""
    parts = plain[:-2].split(b"\n\n")
    carrying = [with_logprobs(e, i) if b'"content"' in e else e for i, e in enumerate(parts)]
    events = b"".join(e + b"\n\n" for e in carrying)

    def account(run: bytes) -> CallResult:
        stream = Stream(Arrived(), CallResult(), capture=False)  # type: ignore[arg-type]
        stream._complete(run, strip_usage=True)
        return stream.result

    check = account(events)
    assert check.logprob_tokens == 32 and b'"logprobs":null' in strip_events(events)
    base = per_call(lambda: account(plain), requests)
    summarised = per_call(lambda: account(events), requests)
    one_read = per_call(lambda: strip_events(events), requests)
    single = [e + b"\n\n" for e in carrying]
    per_read = per_call(lambda: [strip_events(e) for e in single], requests)
    print(
        f"streamed answer (32 chunks), µs: accounting {base:.0f} without logprobs, "
        f"{summarised:.0f} with them (summary); stripping {one_read:.0f} in one read, "
        f"{per_read:.0f} at one event per read"
    )
    answer = chat_answer(128)
    whole = per_call(lambda: strip_json(answer), requests)
    summary = per_call(lambda: summarise(orjson.loads(answer)), requests)
    print(
        f"non-streamed answer (128 tokens, {len(answer) / 1000:.1f} kB), µs: "
        f"strip_json {whole:.0f}, parse and summarise {summary:.0f}"
    )


if __name__ == "__main__":
    main()
