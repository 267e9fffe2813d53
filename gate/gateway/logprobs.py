"""Token log-probabilities on sampled pairs' calls: ask the routes, summarise, strip.

The sampled-parity guardrail (`gate.parity`) compares the mean log-probability of the two
sides' answers; the per-token exactness guardrail (`gate.exactness`) reads each token's
alternatives (`top_logprobs`). On a sampled pair's calls the gateway asks for `logprobs`
(the candidate, and the baseline on the policy's control share, for alternatives too),
keeps a per-call summary for the collector (never the arrays: `Alternatives` gathers
choice 0's entries until the call's exactness fields are computed), and removes them
from the client's answer when the client did not ask: a non-streamed answer through one
JSON round trip (`strip_json`), a streamed one in place, byte for byte (`strip_events`:
only the values of `logprobs` members become `null`, alternatives and all). A request
that cannot make a pair the statistics read (a fixed `seed`, `n` > 1: `pairable`) is
not asked. A route that rejects `logprobs` (a 400 or 422 to a call that carried them
only because we asked, answered once asked again without them) is remembered by this
gateway process and no longer asked: its pairs have the text statistics only
(`RejectingRoutes`).

Who asks is decided in `gate.gateway.asks` (the rollout's policy, or
`SPECGATE_ASK_LOGPROBS`).
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from typing import Any

import orjson

from gate.gateway import sse

log = logging.getLogger(__name__)

# A `logprobs` member's name and colon: after `{` or `,` a quote is JSON structure, never
# inside a string (there it would follow a backslash), so this is always a real member.
_MEMBER = re.compile(rb'[{,]\s*"logprobs"\s*:\s*')
_MEMBER_NAME = b'"logprobs"'
_NULL = b"null"
# Finds where one JSON value ends; it reads text, which latin-1 maps byte for byte.
_SCAN = json.JSONDecoder()
# Statuses that say "this request is invalid": what a route that cannot give logprobs answers.
REJECTIONS = frozenset({400, 422})


def wants_logprobs(body: dict[str, Any]) -> bool:
    """Return whether the client itself asked for log-probabilities."""
    value = body.get("logprobs")
    return value is not None and value is not False


def left_alone(body: dict[str, Any]) -> bool:
    """Return whether the request speaks of log-probabilities itself: it asks for them, or
    for alternatives (`top_logprobs`, which a route refuses without `logprobs`). Adding ours
    would change what the route answers it, so it reaches the route as the client wrote it."""
    return wants_logprobs(body) or body.get("top_logprobs") is not None


def samples(body: dict[str, Any]) -> bool:
    """Return whether the request samples: an explicit temperature above 0 (the parity
    test reads only pairs whose temperature is stated)."""
    value = body.get("temperature")
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def pairable(body: dict[str, Any]) -> bool:
    """Return whether the request can make a pair the statistics read: one answer (`n` of
    1) drawn afresh (no fixed `seed`, which both sides would share)."""
    n = body.get("n")
    return body.get("seed") is None and (n is None or (isinstance(n, int) and n <= 1))


def ask(body: dict[str, Any], *, top: int | None = None) -> dict[str, Any]:
    """Return the body asking for the sampled tokens' log-probabilities, with `top`
    alternatives per token when given (chat `top_logprobs`, completions `logprobs: top`)."""
    if wants_logprobs(body):
        return body
    if not isinstance(body.get("messages"), list):
        return {**body, "logprobs": top or 0}
    return {**body, "logprobs": True, "top_logprobs": top} if top else {**body, "logprobs": True}


def strip_choices(parsed: dict[str, Any]) -> dict[str, Any]:
    """Return a response body or SSE chunk with every choice's `logprobs` set to null."""
    choices = parsed.get("choices")
    if not isinstance(choices, list):
        return parsed
    kept = [{**c, "logprobs": None} if isinstance(c, dict) else c for c in choices]
    return {**parsed, "choices": kept}


def strip_json(content: bytes) -> bytes:
    """Return a non-streamed JSON answer without the log-probabilities we asked for."""
    try:
        parsed = orjson.loads(content)
    except orjson.JSONDecodeError:
        return content
    if not isinstance(parsed, dict):
        return content
    return orjson.dumps(strip_choices(parsed))


def strip_events(events: bytes) -> bytes:
    """Return SSE events with every `logprobs` value set to null, every other byte as it
    came; events without log-probabilities come back as they are."""
    if _MEMBER_NAME not in events:
        return events
    if events.count(sse.LF) == 2 * events.count(sse.EVENT_END):  # one line per event
        try:
            return _nulled(events)
        except ValueError:
            pass  # an event that is not JSON: take them one by one
    return sse.EVENT_END.join(_stripped_event(e) for e in events.split(sse.EVENT_END))


def _nulled(text: bytes) -> bytes:
    """Replace each non-null `logprobs` value in `text` with null, in place; ValueError
    when a value does not read as JSON where it stands."""
    decoded = text.decode("latin-1")  # one character per byte: offsets agree
    parts, kept = [], 0
    for member in _MEMBER.finditer(text):
        start = member.end()
        if start < kept or text.startswith(_NULL, start):  # inside a value already gone
            continue
        try:
            _, end = _SCAN.raw_decode(decoded, start)
        except RecursionError:  # nested deeper than any answer: not ours to read
            raise ValueError("a logprobs value nested too deep") from None
        parts += [text[kept:start], _NULL]
        kept = end
    return b"".join(parts) + text[kept:] if parts else text


def _stripped_event(event: bytes) -> bytes:
    """One event, stripped in place when its data is one line; one whose JSON spans
    several data lines is written again with its data on one line, where the first was.
    Every other line stays where it was; data that is not JSON stays."""
    lines = event.split(sse.LF)
    data = [i for i, line in enumerate(lines) if line.startswith(sse.DATA_FIELD)]
    if len(data) < 2:
        try:
            return _nulled(event)
        except ValueError:
            return event
    try:
        parsed = orjson.loads(sse.event_data(event) or b"")
    except orjson.JSONDecodeError:
        return event
    if not isinstance(parsed, dict) or not _carries_values(parsed):
        return event
    lines[data[0]] = sse.DATA_PREFIX + orjson.dumps(strip_choices(parsed))
    return sse.LF.join(line for i, line in enumerate(lines) if i not in data[1:])


def _carries_values(parsed: dict[str, Any]) -> bool:
    choices = parsed.get("choices")
    return isinstance(choices, list) and any(
        isinstance(c, dict) and c.get("logprobs") is not None for c in choices
    )


@dataclass(frozen=True)
class CallLogprobs:
    """What the collector stores per call: counts and sums, not the arrays."""

    tokens: int  # tokens that carried a log-probability
    total: float  # their sum
    completion_tokens: int | None  # from usage: fewer entries than this means incomplete

    @property
    def mean(self) -> float | None:
        """Return the mean log-probability per token, None without any."""
        return self.total / self.tokens if self.tokens else None

    @property
    def complete(self) -> bool:
        """Return whether every emitted token carried its log-probability."""
        return self.tokens > 0 and self.completion_tokens in (None, self.tokens)


def summarise(parsed: dict[str, Any]) -> CallLogprobs | None:
    """Return the call's log-probability summary; None when the answer carries none."""
    values = [v for c in parsed.get("choices") or () for v in choice_values(c)]
    usage = parsed.get("usage")
    completion = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if not values:
        return None
    return CallLogprobs(len(values), float(sum(values)), _int(completion))


def choice_values(choice: Any) -> list[float]:
    """Return the log-probabilities one choice (or one streamed choice delta) carries."""
    logprobs = choice.get("logprobs") if isinstance(choice, dict) else None
    if not isinstance(logprobs, dict):
        return []
    if isinstance(logprobs.get("content"), list):  # chat, and llama.cpp's completions
        raw = [e.get("logprob") for e in logprobs["content"] if isinstance(e, dict)]
    else:  # OpenAI completions columns
        raw = list(logprobs.get("token_logprobs") or ())
    return [float(v) for v in raw if isinstance(v, int | float) and not isinstance(v, bool)]


class Alternatives:
    """Choice 0's per-token entries with their alternatives (`top_logprobs`), gathered
    across a streamed answer into one OpenAI-format `logprobs` object; references to
    what was parsed, never copies. An answer whose first entries carry no alternatives is
    not kept, nor one with several choices (the exactness test reads one answer)."""

    def __init__(self) -> None:
        self.content: list[Any] = []
        self.columns: tuple[list[Any], list[Any], list[Any]] = ([], [], [])
        self.keeping: bool | None = None  # decided by the first entries
        self.several = False

    def add(self, choice: dict[str, Any]) -> None:
        """Add one choice's (or streamed choice delta's) log-probabilities."""
        if choice.get("index", 0) != 0:
            self.several = True
        logprobs = choice.get("logprobs")
        if self.keeping is False or self.several or not isinstance(logprobs, dict):
            return
        content = logprobs.get("content")
        if isinstance(content, list):
            first = content[0] if content else None
            self._keep(content, first.get("top_logprobs") if isinstance(first, dict) else None)
            if self.keeping:
                self.content += content
            return
        tokens = logprobs.get("tokens")
        if isinstance(tokens, list):
            self._add_columns(tokens, logprobs)

    def _add_columns(self, tokens: list[Any], logprobs: dict[str, Any]) -> None:
        tops = logprobs.get("top_logprobs")
        self._keep(tokens, tops[0] if isinstance(tops, list) and tops else None)
        if not self.keeping:
            return
        values = logprobs.get("token_logprobs")
        # Columns stay aligned token by token whatever one chunk lacks.
        for column, given in zip(self.columns, (tokens, values, tops), strict=True):
            if isinstance(given, list) and len(given) == len(tokens):
                column += given
            else:
                column += [None] * len(tokens)

    def _keep(self, entries: list[Any], first_alternatives: Any) -> None:
        if self.keeping is None and entries:
            self.keeping = bool(first_alternatives)

    def logprobs(self) -> dict[str, Any] | None:
        """Return the gathered `logprobs` object; None without alternatives to read."""
        if not self.keeping or self.several:
            return None
        if self.content:
            return {"content": self.content}
        tokens, values, tops = self.columns
        return {"tokens": tokens, "token_logprobs": values, "top_logprobs": tops}


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class RejectingRoutes:
    """Routes that rejected the `logprobs` we added: remembered by this gateway process
    (until it restarts, not shared between replicas) and no longer asked."""

    def __init__(self) -> None:
        self._routes: set[int] = set()

    def may_ask(self, route_id: int) -> bool:
        """Return whether the route may still be asked for log-probabilities."""
        return route_id not in self._routes

    def rejected(self, route_id: int, name: str, *, answered_without: int | None) -> None:
        """A call rejected with our `logprobs` was made again without them: remember the
        route when that call was answered (the rejection was ours); one rejected again
        was the client's own error."""
        answered = answered_without is not None and 200 <= answered_without < 300
        if answered and route_id not in self._routes:
            self._routes.add(route_id)
            log.warning("logprobs_rejected route=%s", name)
