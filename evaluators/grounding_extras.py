"""Optional groundedness signals: a local embedding model and an LLM judge.

Both are off by default and import their dependencies only when switched on, so the
deterministic evaluator needs neither sentence-transformers nor a network.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

import httpx
import numpy as np
import numpy.typing as npt

from evaluators.claims import ClaimSupport, split_sentences

Encoder = Callable[[list[str]], npt.NDArray[np.float64]]


class ClaimSignal(Protocol):
    """An extra signal that may lower claims' support after the deterministic pass."""

    def adjust(self, supports: list[ClaimSupport], sources: Sequence[str]) -> list[ClaimSupport]:
        """Return the claims with their score and support updated by this signal."""
        ...


class EmbeddingSignal:
    """Blends in each claim's best cosine similarity to a context sentence."""

    def __init__(
        self,
        model: str = "sentence-transformers/all-MiniLM-L6-v2",
        *,
        weight: float = 0.3,
        min_similarity: float = 0.5,
        encode: Encoder | None = None,
    ) -> None:
        self.model = model
        self.weight = weight
        self.min_similarity = min_similarity
        self._encode = encode

    def adjust(self, supports: list[ClaimSupport], sources: Sequence[str]) -> list[ClaimSupport]:
        """Return the claims with the similarity blended into their score."""
        chunks = [s for source in sources for s in split_sentences(source)]
        if not supports or not chunks:
            return supports
        vectors = self.encoder([s.text for s in supports] + chunks)
        vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        best = (vectors[: len(supports)] @ vectors[len(supports) :].T).max(axis=1)
        return [self._blend(s, float(sim)) for s, sim in zip(supports, best, strict=True)]

    def _blend(self, support: ClaimSupport, similarity: float) -> ClaimSupport:
        score = (1 - self.weight) * support.score + self.weight * max(similarity, 0.0)
        return replace(
            support,
            score=score,
            supported=support.supported and similarity >= self.min_similarity,
            signals={**support.signals, "embedding_similarity": round(similarity, 4)},
        )

    @property
    def encoder(self) -> Encoder:
        """Return the encoder, loading the model on first use."""
        if self._encode is None:
            # Imported here: sentence-transformers (and torch) are optional extras.
            from sentence_transformers import SentenceTransformer  # type: ignore[import-not-found]

            model = SentenceTransformer(self.model, device="cpu")
            self._encode = lambda texts: np.asarray(model.encode(texts), dtype=np.float64)
        return self._encode


_JUDGE_PROMPT = """You check whether claims are supported by a context.
Context:
{context}

Claims:
{claims}

Answer with JSON only: {{"supported": [true or false for each claim, in order]}}."""


class JudgeSignal:
    """Asks an OpenAI-compatible model whether each claim is supported."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key_env: str | None = None,
        timeout_s: float = 30.0,
        penalty: float = 0.5,
        max_tokens: int = 256,
        client: httpx.Client | None = None,
    ) -> None:
        self.model = model
        self.penalty = penalty
        # Bounded: a verdict list is short, and a rambling judge must not hold a worker.
        self.max_tokens = max_tokens
        # The key is read from the environment: policies are stored and shown, keys not.
        key = os.environ.get(api_key_env, "") if api_key_env else ""
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.client = client or httpx.Client(timeout=timeout_s)
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.headers = headers

    def adjust(self, supports: list[ClaimSupport], sources: Sequence[str]) -> list[ClaimSupport]:
        """Return the claims, with those the judge rejects marked unsupported."""
        if not supports:
            return supports
        try:
            verdicts = self._ask([s.text for s in supports], "\n\n".join(sources))
        except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
            note = {"judge_error": f"{type(exc).__name__}: {exc}"[:200]}
            return [replace(s, signals={**s.signals, **note}) for s in supports]
        return [self._apply(s, v) for s, v in zip(supports, verdicts, strict=True)]

    def _apply(self, support: ClaimSupport, verdict: bool) -> ClaimSupport:
        return replace(
            support,
            score=support.score if verdict else support.score * self.penalty,
            supported=support.supported and verdict,
            signals={**support.signals, "judge_supported": verdict},
        )

    def _ask(self, claims: list[str], context: str) -> list[bool]:
        numbered = "\n".join(f"{i + 1}. {c}" for i, c in enumerate(claims))
        body = {
            "model": self.model,
            "temperature": 0,
            "max_tokens": self.max_tokens,
            "response_format": {"type": "json_object"},
            "messages": [
                {"role": "user", "content": _JUDGE_PROMPT.format(context=context, claims=numbered)}
            ],
        }
        response = self.client.post(self.url, json=body, headers=self.headers)
        response.raise_for_status()
        content = response.json()["choices"][0]["message"]["content"]
        verdicts = json.loads(content)["supported"]
        if not isinstance(verdicts, list) or len(verdicts) != len(claims):
            raise ValueError(f"judge gave {verdicts!r} for {len(claims)} claims")
        return [bool(v) for v in verdicts]


def build_signals(options: Mapping[str, Any]) -> list[ClaimSignal]:
    """Build the extra signals a policy switched on (`embedding`, `judge`)."""
    signals: list[ClaimSignal] = []
    if options.get("embedding"):
        settings = options["embedding"]
        signals.append(EmbeddingSignal(**(settings if isinstance(settings, Mapping) else {})))
    if options.get("judge"):
        signals.append(JudgeSignal(**options["judge"]))
    return signals
