"""The episode a request belongs to: one conversation or agent run, declared once.

The gate's unit of independence is the episode, not the request (issue 39): the turns of
one conversation share a user, a context and a difficulty. A request's episode is read
from the first of these that it carries:

1. the `X-Specgate-Episode` header (specgate's own: a bad value is a 400);
2. W3C Baggage (`baggage` header) entries named as the OpenTelemetry semantic
   conventions name the attributes: `gen_ai.conversation.id` (GenAI), then `session.id`
   (session conventions);
3. the OpenAI body's `metadata.episode_id`, then `metadata.conversation_id`;
4. the OpenAI body's `user` (stored as `user:` and a hash, since it names a person: all of
   one user's conversations become one episode, which only makes the gate's episodes
   coarser, never finer);
5. a chat request that continues a conversation (messages after its first user message):
   `prefix:` and a hash of its messages up to and including the first user message (role
   and content), which every later turn repeats. Conversations that open with the same
   words share it. An opening turn (nothing after its first user message) is its own
   episode, so that identical one-shot requests (a benchmark, a fixed prompt) are not
   merged into one; it is still assigned by that hash (`Episode.key`), so the turns that
   follow it stay in its cohort.

A completion (`prompt`) request without any of them is its own episode (none). A value
borrowed from another convention (2 to 4) that is not a string of 1 to `MAX_CHARS`
printable characters is ignored, with the reason kept, and the next source is read.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import orjson

from gate.db.enums import EpisodeSource
from gate.errors import BadRequest

EPISODE_HEADER = "x-specgate-episode"
BAGGAGE_HEADER = "baggage"
# OTel attribute names (GenAI, then session conventions), read from W3C Baggage entries.
BAGGAGE_KEYS = ("gen_ai.conversation.id", "session.id")
METADATA_KEYS = ("episode_id", "conversation_id")
MAX_CHARS = 256


@dataclass(frozen=True)
class Episode:
    """A request's episode id and where it came from (both None: its own episode), and the
    borrowed values that were ignored, as `source: reason`."""

    id: str | None = None
    source: EpisodeSource | None = None
    ignored: tuple[str, ...] = ()
    # An opening turn's conversation hash: what assignment hashes, though not an episode.
    opening: str | None = None

    @property
    def key(self) -> str | None:
        """What cohort assignment hashes (None: the request's body)."""
        return self.id or self.opening


OWN = Episode()  # the request is its own episode


def episode_of(headers: Mapping[str, str], body: Mapping[str, Any]) -> Episode:
    """Return the episode of a request (its parsed body and headers), or refuse a bad header."""
    declared = headers.get(EPISODE_HEADER)
    if declared:
        if _why_bad(declared):
            raise BadRequest(f"X-Specgate-Episode must be 1 to {MAX_CHARS} printable characters")
        return Episode(declared, EpisodeSource.HEADER)
    ignored: list[str] = []
    for source, value in _borrowed(headers, body):
        why = _why_bad(value)
        if why is None:
            assert isinstance(value, str)
            if source is EpisodeSource.USER:
                value = "user:" + _digest(value.encode())
            return Episode(value, source, tuple(ignored))
        ignored.append(f"{source.value}: {why}")
    opening = conversation_prefix(body)
    if opening is None:
        return Episode(ignored=tuple(ignored)) if ignored else OWN
    prefix, continues = opening
    named = "prefix:" + _digest(prefix)
    if not continues:
        return Episode(ignored=tuple(ignored), opening=named)
    return Episode(named, EpisodeSource.PREFIX, tuple(ignored))


def _borrowed(
    headers: Mapping[str, str], body: Mapping[str, Any]
) -> list[tuple[EpisodeSource, Any]]:
    """Return the values other conventions carry, in order of precedence."""
    found: list[tuple[EpisodeSource, Any]] = []
    baggage = headers.get(BAGGAGE_HEADER)
    if baggage:
        entries = _baggage(baggage)
        found += [(EpisodeSource.BAGGAGE, entries[k]) for k in BAGGAGE_KEYS if k in entries]
    metadata = body.get("metadata")
    if isinstance(metadata, Mapping):
        found += [(EpisodeSource.METADATA, metadata[k]) for k in METADATA_KEYS if k in metadata]
    if "user" in body and body["user"] != "":
        found.append((EpisodeSource.USER, body["user"]))
    return found


def _baggage(header: str) -> dict[str, str]:
    """Return the entries of a W3C Baggage header named as the keys we read (values decoded)."""
    entries: dict[str, str] = {}
    for member in header.split(","):
        key, sep, rest = member.partition("=")
        key = key.strip()
        if sep and key in BAGGAGE_KEYS:
            entries[key] = unquote(rest.partition(";")[0].strip())
    return entries


def _why_bad(value: Any) -> str | None:
    """Return why a value cannot name an episode (None: it can)."""
    if not isinstance(value, str):
        return "not a string"
    if not value or len(value) > MAX_CHARS:
        return f"not 1 to {MAX_CHARS} characters"
    if not value.isprintable():
        return "not printable"
    return None


def conversation_prefix(body: Mapping[str, Any]) -> tuple[bytes, bool] | None:
    """Return the bytes the prefix hash covers (a chat request's messages up to and including
    its first user message, as (role, content)) and whether messages follow them; None
    without a user message."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return None
    prefix = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            return None
        prefix.append((message.get("role"), message.get("content")))
        if message.get("role") == "user":
            return orjson.dumps(prefix, option=orjson.OPT_SORT_KEYS), i < len(messages) - 1
    return None


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()
