"""Deterministic text analysis for groundedness: claims, tokens, numbers, entities, quotes."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

# Function words and discourse fillers: they carry no claim, so coverage ignores them.
STOPWORDS = frozenset(
    """a an the and or but nor if of to in on at by for with from as into onto about over
    under after before between both either neither each all any some such is are was were
    be been being am it its it's this that these those he she they them his her hers their
    theirs there here which who whom whose what when where why how not no yes do does did
    done has have had having i you we our ours your yours my me us him also than then so
    too very just can could would should will shall may might must one ones only own same
    other another more most less much many few via per while during since until upon up
    down out off again further once s t don't doesn't didn't isn't aren't wasn't weren't
    however therefore thus hence indeed sure okay ok well""".split()  # noqa: SIM905
)

_NUMBER_WORDS = {
    "zero": "0", "two": "2", "three": "3", "four": "4", "five": "5",
    "six": "6", "seven": "7", "eight": "8", "nine": "9", "ten": "10", "eleven": "11",
    "twelve": "12", "thirteen": "13", "fourteen": "14", "fifteen": "15", "sixteen": "16",
    "seventeen": "17", "eighteen": "18", "nineteen": "19", "twenty": "20", "thirty": "30",
    "forty": "40", "fifty": "50", "sixty": "60", "seventy": "70", "eighty": "80",
    "ninety": "90", "hundred": "100", "thousand": "1000",
}  # fmt: skip

# Words split at underscores too, so JSON keys from tool results ("temp_c") are words.
_TOKEN = re.compile(r"\d+(?:[.,]\d+)*(?:st|nd|rd|th|s)?|[^\W_]+(?:['\u2019][^\W_]+)*")
_NUMERIC = re.compile(r"(\d+(?:[.,]\d+)*)(?:st|nd|rd|th|s)?")
_FENCE = re.compile(r"```.*?(?:```|\Z)", re.DOTALL)
# Sentence ends, not after a common abbreviation or a lone initial ("J. Smith").
_ABBREVIATIONS = r"(?<!\bMr)(?<!\bMrs)(?<!\bMs)(?<!\bDr)(?<!\bSt)(?<!\bvs)(?<!\be\.g)(?<!\bi\.e)"
_SENTENCE_END = re.compile(_ABBREVIATIONS + r"(?<!\b[A-Z])[.!?;]+[\"”')\]]*\s+")
_QUOTE = re.compile(r"[\"“]([^\"“”]{3,}?)[\"”]")
_LIST_MARK = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")


@dataclass(frozen=True)
class Claim:
    """One sentence of the answer with the pieces that must be found in the context."""

    text: str
    tokens: tuple[str, ...]
    content: tuple[str, ...]
    numbers: tuple[str, ...]
    # (as written, normalised tokens): names and quoted spans that must occur as such.
    entities: tuple[tuple[str, tuple[str, ...]], ...]
    quotes: tuple[tuple[str, tuple[str, ...]], ...]


@dataclass(frozen=True)
class ClaimSupport:
    """How well one claim is supported, and what of it was not found."""

    text: str
    score: float
    supported: bool
    token_coverage: float
    ngram_coverage: float
    missing_tokens: list[str]
    missing_numbers: list[str]
    missing_entities: list[str]
    missing_quotes: list[str]
    # What optional signals (embedding, judge) said about the claim.
    signals: dict[str, Any] = field(default_factory=dict)


# Cached: the same few thousand word forms recur across every context and answer.
@lru_cache(maxsize=65536)
def normalise_token(raw: str) -> str:
    """Lower-case a token and reduce it to a light stem (possessive, plural, number form)."""
    token = raw.lower().replace("\u2019", "'")
    if token.endswith("'s"):
        token = token[:-2]
    if token in _NUMBER_WORDS:
        return _NUMBER_WORDS[token]
    number = _NUMERIC.fullmatch(token)
    if number:
        return _normalise_number(number.group(1))
    if len(token) > 4 and token.endswith("ies"):
        return token[:-3] + "y"
    if len(token) > 3 and token.endswith("s") and not token.endswith(("ss", "us", "is")):
        return token[:-1]
    return token


def _normalise_number(text: str) -> str:
    # "1,000" and "1000" are one number; "3.50" and "3.5" too. A comma with other than
    # three digits after it is a decimal comma.
    parts = text.split(",")
    if len(parts) > 1 and all(len(p) == 3 for p in parts[1:]):
        text = "".join(parts)
    text = text.replace(",", ".")
    if "." in text:
        text = text.rstrip("0").rstrip(".") or "0"
    return text.lstrip("0") or "0"


def tokens(text: str) -> list[str]:
    """Return the normalised tokens of a text."""
    return [normalise_token(t) for t in _TOKEN.findall(text)]


def is_number(token: str) -> bool:
    """Return whether a normalised token is a number."""
    return token[:1].isdigit()


def split_sentences(text: str) -> list[str]:
    """Split prose into sentences and list items; code blocks are not claims."""
    prose = _FENCE.sub("\n", text)
    sentences: list[str] = []
    for line in prose.splitlines():
        line = _LIST_MARK.sub("", line).strip()
        start = 0
        for end in _SENTENCE_END.finditer(line + " "):
            sentences.append(line[start : end.end()].strip())
            start = end.end()
        sentences.append(line[start:].strip())
    return [s for s in sentences if s]


def answer_prose(output: str) -> str:
    """Return the text to check: a JSON answer's string and number values, else the answer."""
    stripped = output.strip()
    if not stripped.startswith(("{", "[")):
        return output
    try:
        value = json.loads(stripped)
    except json.JSONDecodeError:
        return output
    # Keys are the schema's words, not claims: only the values say something.
    return "\n".join(_leaves(value))


def _leaves(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in _leaves(item)]
    if isinstance(value, list):
        return [leaf for item in value for leaf in _leaves(item)]
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        return [str(value)]
    return []


def extract_claims(text: str) -> list[Claim]:
    """Return the checkable claims of an answer: sentences with content, not questions."""
    claims = []
    for sentence in split_sentences(text):
        if sentence.rstrip("\"”') ").endswith("?"):
            continue
        claim = _claim(sentence)
        if claim.content:
            claims.append(claim)
    return claims


def _claim(sentence: str) -> Claim:
    words = _TOKEN.findall(sentence)
    normal = tuple(normalise_token(w) for w in words)
    content = tuple(t for t in normal if t not in STOPWORDS)
    numbers = tuple(t for t, w in zip(normal, words, strict=True) if w[:1].isdigit())
    quotes = tuple((q, tuple(tokens(q))) for q in _QUOTE.findall(sentence) if tokens(q))
    return Claim(sentence, normal, content, numbers, _entities(words), quotes)


def _entities(words: list[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Return runs of capitalised words, skipping a lone sentence-initial capital."""
    runs: list[tuple[str, tuple[str, ...]]] = []
    start: int | None = None
    for index, word in enumerate([*words, ""]):
        if word[:1].isupper() and normalise_token(word) not in STOPWORDS:
            start = index if start is None else start
            continue
        run = words[start:index] if start is not None else []
        # A sentence starts with a capital anyway, and one letter is a unit or a label.
        if run and (start, index) != (0, 1) and (len(run) > 1 or len(run[0]) > 1):
            runs.append((" ".join(run), tuple(normalise_token(w) for w in run)))
        start = None
    return tuple(runs)


@dataclass(frozen=True)
class ContextIndex:
    """The context's tokens, bigrams and numbers, built once per request."""

    vocabulary: frozenset[str]
    bigrams: frozenset[tuple[str, str]]
    numbers: frozenset[str]
    joined: str
    # The same text without one-letter words, so "Richard Nixon" matches "Richard M. Nixon".
    joined_loose: str
    # Each context sentence's tokens: a claim should be supported by one place, not by
    # words gathered from all over a long document.
    sentences: tuple[frozenset[str], ...] = ()

    def sentence_support(self, content: Sequence[str]) -> int:
        """Return how many of the claim's content tokens its best context sentence holds."""
        return max((sum(t in s for t in content) for s in self.sentences), default=0)

    def fragments(self, tokens: Sequence[str]) -> list[int]:
        """Return the lengths of the answer's runs copied from the context.

        A run is a stretch of tokens whose every adjacent pair occurs in the context (a
        cheap stand-in for the longest common substring); a lone token counts as a run of
        one when the context holds it, and not at all otherwise.
        """
        runs: list[int] = []
        length = 0
        for index, token in enumerate(tokens):
            linked = index > 0 and (tokens[index - 1], token) in self.bigrams
            if linked and length:
                length += 1
                continue
            if length:
                runs.append(length)
            length = 1 if token in self.vocabulary else 0
        if length:
            runs.append(length)
        return runs

    def contains_phrase(self, phrase: tuple[str, ...], *, loose: bool = False) -> bool:
        """Return whether the token sequence occurs contiguously in the context."""
        if loose:
            return f" {' '.join(_drop_initials(phrase))} " in self.joined_loose
        return f" {' '.join(phrase)} " in self.joined


def _drop_initials(normal: Sequence[str]) -> list[str]:
    return [t for t in normal if len(t) > 1 or t.isdigit()]


@lru_cache(maxsize=256)
def index_context(sources: tuple[str, ...]) -> ContextIndex:
    """Index the context documents (cached: both sides of a pair share one request)."""
    vocabulary: set[str] = set()
    bigrams: set[tuple[str, str]] = set()
    joined, loose = [], []
    sentences: list[frozenset[str]] = []
    for source in sources:
        sentences += [frozenset(tokens(s)) for s in split_sentences(source)]
        normal = tokens(source)
        vocabulary.update(normal)
        bigrams.update(itertools.pairwise(normal))
        joined.append(" ".join(normal))
        loose.append(" ".join(_drop_initials(normal)))
    numbers = frozenset(t for t in vocabulary if is_number(t))
    return ContextIndex(
        frozenset(vocabulary),
        frozenset(bigrams),
        numbers,
        f" {' | '.join(joined)} ",
        f" {' | '.join(loose)} ",
        tuple(sentences),
    )
