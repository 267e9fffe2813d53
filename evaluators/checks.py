"""Reference checks a request can declare: exact, normalised, numeric, regex, contains-all.

A check is a mapping with `type` and its operands, for example
`{"type": "numeric", "value": 42, "tolerance": 0.5}` or
`{"type": "regex", "pattern": "^yes\\b", "flags": "i"}`. A check without `value` uses the
request's declared `reference`.
"""

from __future__ import annotations

import math
import re
import string
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?")
_ARTICLES = re.compile(r"\b(?:a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)
_FLAGS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL}


@dataclass(frozen=True)
class CheckOutcome:
    """The outcome of one declared check."""

    type: str
    passed: bool
    detail: str


def normalise_text(text: str) -> str:
    """Lower-case, drop punctuation and articles, and collapse whitespace."""
    text = unicodedata.normalize("NFKC", text).lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def last_number(text: str) -> float | None:
    """Return the last number written in the text (the final answer, by convention)."""
    found = _NUMBER.findall(text)
    return float(found[-1].replace(",", "")) if found else None


def _exact(answer: str, check: Mapping[str, Any]) -> CheckOutcome:
    expected = str(check["value"])
    return CheckOutcome("exact", answer.strip() == expected.strip(), f"expected {expected!r}")


def _normalised(answer: str, check: Mapping[str, Any]) -> CheckOutcome:
    expected = normalise_text(str(check["value"]))
    got = normalise_text(answer)
    return CheckOutcome("normalised", got == expected, f"expected {expected!r}, got {got[:200]!r}")


def _numeric(answer: str, check: Mapping[str, Any]) -> CheckOutcome:
    expected = float(check["value"])
    got = last_number(answer)
    if got is None:
        return CheckOutcome("numeric", False, "no number in the answer")
    close = math.isclose(
        got,
        expected,
        abs_tol=float(check.get("tolerance", 1e-9)),
        rel_tol=float(check.get("rel_tolerance", 0.0)),
    )
    return CheckOutcome("numeric", close, f"expected {expected}, got {got}")


def _regex(answer: str, check: Mapping[str, Any]) -> CheckOutcome:
    flags = 0
    for letter in str(check.get("flags", "")):
        flags |= _FLAGS[letter]
    pattern = re.compile(str(check["pattern"]), flags)
    matched = pattern.fullmatch(answer.strip()) if check.get("full") else pattern.search(answer)
    return CheckOutcome("regex", matched is not None, f"pattern {pattern.pattern!r}")


def _contains_all(answer: str, check: Mapping[str, Any]) -> CheckOutcome:
    got = f" {normalise_text(answer)} "
    missing = [v for v in check["values"] if f" {normalise_text(str(v))} " not in got]
    return CheckOutcome("contains_all", not missing, f"missing {missing!r}" if missing else "")


CHECKS: dict[str, Callable[[str, Mapping[str, Any]], CheckOutcome]] = {
    "exact": _exact,
    "normalised": _normalised,
    "numeric": _numeric,
    "regex": _regex,
    "contains_all": _contains_all,
}


def declared_checks(inputs: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Return the request's checks; a bare `reference` means one normalised check."""
    reference = inputs.get("reference")
    checks = inputs.get("checks")
    if isinstance(checks, list):
        return [
            {"value": reference, **c} if "value" not in c else c
            for c in checks
            if isinstance(c, Mapping)
        ]
    if reference is not None:
        return [{"type": "normalised", "value": reference}]
    return []


def run_check(answer: str, check: Mapping[str, Any]) -> CheckOutcome:
    """Run one check; a malformed check fails with the reason instead of raising."""
    kind = str(check.get("type", ""))
    if kind not in CHECKS:
        return CheckOutcome(kind, False, f"unknown check type {kind!r}")
    try:
        return CHECKS[kind](answer, check)
    except (KeyError, TypeError, ValueError, re.error) as exc:
        return CheckOutcome(kind, False, f"malformed check: {type(exc).__name__}: {exc}")
