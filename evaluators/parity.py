"""Greedy parity: at temperature 0 the two sides of a pair should say the same thing,
in text and in tool calls (names and arguments, compared as canonical JSON).

Engines are lossless only up to numerics, so a mismatch is a rate the gate compares with
the baseline-vs-baseline control slice, not an assertion. Tokens here are whitespace
tokens of the captured text: the engine's own token ids are not recorded, and whitespace
tokens are stable across tokenizers, so "first differing token" is a word position.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from evaluators.base import EvalResult, GenerationView, RequestView, ToolCall


def first_difference(a: Sequence[Any], b: Sequence[Any]) -> int | None:
    """Return the first index where the sequences differ, or None when they are equal."""
    if isinstance(a, str) and isinstance(b, str):
        # Character by character, in C; the RUF071 warning is about paths, not this use.
        common = len(os.path.commonprefix([a, b]))  # noqa: RUF071
    else:
        pairs = enumerate(zip(a, b, strict=False))
        common = next((i for i, (x, y) in pairs if x != y), min(len(a), len(b)))
    return None if common == len(a) == len(b) else common


def _stop_reason(generation: GenerationView) -> Any:
    # vLLM reports which stop string or token ended the output as `stop_reason`.
    return generation.output_extra.get("stop_reason")


def canonical_call(call: ToolCall) -> str:
    """Return a tool call as canonical JSON: its name and its arguments, keys sorted.

    Arguments arrive as a JSON string (OpenAI) or an object; a string that is not JSON is
    compared as it is, so two malformed calls still match only when identical.
    """
    arguments = call.arguments
    if isinstance(arguments, str):
        with contextlib.suppress(ValueError):
            arguments = json.loads(arguments)
    return json.dumps([call.name, arguments], sort_keys=True, separators=(",", ":"))


def _length(generation: GenerationView) -> int:
    if generation.output_tokens is not None:
        return generation.output_tokens
    return len(generation.output.split())


class GreedyParityEvaluator:
    """Compares the text, tool calls, finish reason and stop sequence of a temperature-0 pair."""

    name = "greedy_parity"
    version = "2"  # 2: tool calls are compared too

    def __init__(self, *, max_temperature: float = 0.0) -> None:
        self.max_temperature = max_temperature

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> GreedyParityEvaluator:
        """Build from policy options."""
        return cls(**options)

    def applies(self, request: RequestView, sides: Sequence[GenerationView]) -> bool:
        """Apply to pairs sampled greedily (the request's temperature, else the sides')."""
        if request.temperature is not None:
            return request.temperature <= self.max_temperature
        temperatures = [s.temperature for s in sides]
        return bool(temperatures) and all(
            t is not None and t <= self.max_temperature for t in temperatures
        )

    def compare(self, baseline: GenerationView, other: GenerationView) -> EvalResult:
        """Score how long the two texts agree, whether they called the same tools with the
        same arguments, and whether they ended the same way."""
        words_a, words_b = baseline.output.split(), other.output.split()
        calls_a = [canonical_call(c) for c in baseline.tool_calls]
        calls_b = [canonical_call(c) for c in other.tool_calls]
        call_diff = first_difference(calls_a, calls_b)
        char_diff = first_difference(baseline.output, other.output)
        token_diff = first_difference(words_a, words_b)
        finish_same = baseline.finish_reason == other.finish_reason
        stop_same = finish_same and _stop_reason(baseline) == _stop_reason(other)
        longest = max(len(words_a), len(words_b))
        agreed = longest if token_diff is None else token_diff
        details = {
            "exact_match": char_diff is None and call_diff is None,
            "tool_calls": [len(calls_a), len(calls_b)],
            "first_diff_tool_call": call_diff,
            "first_diff_char": char_diff,
            "first_diff_token": token_diff,
            "tokenisation": "whitespace",
            "tokens": [len(words_a), len(words_b)],
            "finish_reasons": [baseline.finish_reason, other.finish_reason],
            "finish_reason_match": finish_same,
            "stop_reason_match": stop_same,
            "length_ratio": _ratio(_length(other), _length(baseline)),
            "baseline_generation_id": baseline.generation_id,
        }
        score = agreed / longest if longest else 1.0
        if call_diff is not None:
            score = min(score, call_diff / max(len(calls_a), len(calls_b)))
        passed = char_diff is None and call_diff is None and stop_same
        return EvalResult(score=score, passed=passed, details=details)


def _ratio(numerator: int, denominator: int) -> float | None:
    if denominator == 0:
        return None if numerator else 1.0
    return round(numerator / denominator, 6)
