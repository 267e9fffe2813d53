"""Per-token exactness fields of route calls, computed off the event loop.

A call whose answer carries alternatives (`top_logprobs`) gets its exactness fields
(`gate.exactness.exactness_fields`: about 20-40 µs per token in Python) on its span as
`specgate.exactness`. Computed on the event loop they would hold every other request of
the gateway for milliseconds per long answer, and a canary's client would wait for them;
so one background thread computes them and then ends the call's span. The event loop
only hands the answer's gathered entries over, once the call is complete.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson

from gate.db.enums import GenerationStatus
from gate.exactness import exactness_fields
from gate.gateway.observe import CallResult
from gate.routing.snapshot import ExactnessAsk

log = logging.getLogger(__name__)

# Ends a span, given its exactness attribute (None: without it).
EndSpan = Callable[[str | None], None]
# Computes the attribute (None: the call has nothing to test).
Fit = Callable[[], str | None]


def fit_of(ask: ExactnessAsk | None, body: dict[str, Any], result: CallResult) -> Fit | None:
    """Return the computation of a finished call's exactness attribute; None when there
    is nothing to compute (no policy asks, a failed or greedy call, no alternatives)."""
    if ask is None or result.status is not GenerationStatus.OK or result.alternatives is None:
        return None
    logprobs = result.alternatives.logprobs()
    temperature, top_p = _number(body.get("temperature")), _number(body.get("top_p"))
    top_k = body.get("top_k")
    if logprobs is None or temperature is None or temperature <= 0.0:
        return None
    k = top_k if isinstance(top_k, int) and not isinstance(top_k, bool) else None

    def fit() -> str | None:
        found = exactness_fields(
            logprobs, temperature=temperature, top_p=top_p, top_k=k, mode=ask.mode
        )
        return None if found is None else orjson.dumps(found.as_dict()).decode()

    return fit


def _number(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    return float(value) if ok else None


class FitWorker:
    """One thread that computes calls' exactness attributes and ends their spans.

    Bounded: with `max_pending` calls already waiting (or once closed), a span ends at
    once without the attribute and `on_skipped` counts it. A computation that fails is
    logged and its span ends without the attribute: it never loses the span."""

    def __init__(self, *, max_pending: int, on_skipped: Callable[[], None]) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="specgate-fits")
        self._max_pending = max_pending
        self._on_skipped = on_skipped
        self._pending = 0
        self._closed = False
        self._lock = threading.Lock()

    def end_with(self, end: EndSpan, fit: Fit) -> None:
        """End a span once its exactness attribute is computed, in the worker thread."""
        with self._lock:
            full = self._closed or self._pending >= self._max_pending
            self._pending += 0 if full else 1
        if full:
            self._on_skipped()
            end(None)
            return
        self._executor.submit(self._run, end, fit)

    def _run(self, end: EndSpan, fit: Fit) -> None:
        value = None
        try:
            value = fit()
        except Exception:  # a malformed answer must cost the field, never the span
            log.exception("gateway.exactness_failed")
        try:
            end(value)
        finally:
            with self._lock:
                self._pending -= 1

    def close(self) -> None:
        """Finish what was handed over (its spans end), then refuse more."""
        with self._lock:
            self._closed = True
        self._executor.shutdown(wait=True)
