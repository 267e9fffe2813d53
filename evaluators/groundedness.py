"""Groundedness: is each claim of the answer supported by the request's context?

Deterministic signals per claim (sentence): content-token coverage and bigram coverage
against the context, and checks that numbers, quoted spans and capitalised named
entities appear in it. The answer's score is calibrated per task kind (question
answering, summary, dialogue; `evaluators.grounding_score`): the estimated probability
that it is grounded. For question answering a claim with a missing number, quote or
entity also fails the answer outright; summaries and dialogue replies paraphrase, so
there those misses only lower the score. The optional embedding and LLM-judge signals
live in `evaluators.grounding_extras` and are off unless the policy names them, and so is
the model-based PMI signal (`evaluators.grounding_pmi`, `{"pmi": {}}`): SmolLM2's
pointwise mutual information between each claim and the context, a feature of its own
per-task calibration (`PMI_CALIBRATIONS`).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from evaluators.base import EvalResult, GenerationView, RequestView
from evaluators.claims import (
    Claim,
    ClaimSupport,
    ContextIndex,
    answer_prose,
    extract_claims,
    index_context,
)
from evaluators.grounding_extras import ClaimSignal, build_signals
from evaluators.grounding_pmi import pmi_inputs
from evaluators.grounding_score import (
    DEFAULT_CALIBRATIONS,
    PMI_CALIBRATIONS,
    TASK_KINDS,
    Calibration,
    answer_features,
    calibrated_score,
    task_kind,
)
from gate.request.messages import message_text


class PmiFeatures(Protocol):
    """The model-based signal (`evaluators.grounding_pmi.PmiScorer`)."""

    def features(self, context: str, prompt: str, claims: Sequence[str]) -> dict[str, float]:
        """Return the answer-level PMI features of its claims."""
        ...


# Bigram pairs of two function words say nothing about the context ("of the").
_STOP_PAIR_TOKENS = frozenset({"the", "a", "an", "of", "in", "on", "to", "and", "is", "was"})


def context_sources(
    request: RequestView, *, include_system: bool = True, include_user: bool = False
) -> tuple[str, ...]:
    """Return the texts an answer may draw on: declared context, tool results, system."""
    roles = {"tool", "function"}
    roles |= {"system", "developer"} if include_system else set()
    roles |= {"user"} if include_user else set()
    sources = [_document_text(doc) for doc in _declared_documents(request.inputs)]
    sources += [message_text(m) for m in request.messages if m.get("role") in roles]
    return tuple(s for s in sources if s.strip())


def has_context(request: RequestView) -> bool:
    """Return whether the request carries retrieval documents or tool results."""
    if _declared_documents(request.inputs):
        return True
    return any(m.get("role") in {"tool", "function"} for m in request.messages)


def _declared_documents(inputs: Mapping[str, Any]) -> list[Any]:
    declared = inputs.get("context")
    if declared is None:
        return []
    return list(declared) if isinstance(declared, list) else [declared]


def _document_text(document: Any) -> str:
    if isinstance(document, Mapping):
        for key in ("text", "content", "page_content"):
            if isinstance(document.get(key), str):
                return str(document[key])
        return ""
    return document if isinstance(document, str) else str(document)


@dataclass(frozen=True)
class GroundednessOptions:
    """Thresholds and weights (defaults measured on HaluEval: bench/results/history-evaluators.md).

    `threshold` sets one pass threshold for every request; `thresholds` sets it per
    segment (the request's declared `segment`) or per task kind (`qa`, `summary`,
    `dialogue`), a segment's entry first, over the measured defaults. `task` forces the
    task kind of every request and `tasks` that of a segment, instead of inferring it.
    """

    threshold: float | None = None
    thresholds: Mapping[str, float] | None = None
    task: str | None = None
    tasks: Mapping[str, str] | None = None
    claim_threshold: float = 0.6
    max_unsupported_claims: int = 0
    token_weight: float = 0.7
    hard_penalty: float = 0.5
    include_system: bool = True
    include_user: bool = False


class GroundednessEvaluator:
    """Scores how much of the answer the context supports, claim by claim."""

    name = "groundedness"
    # 2: the score is a calibrated probability per task kind (issue 30), not a coverage.
    version = "2"

    def __init__(
        self,
        options: GroundednessOptions | None = None,
        signals: Sequence[ClaimSignal] = (),
        pmi: PmiFeatures | None = None,
    ) -> None:
        self.options = options or GroundednessOptions()
        self.signals = list(signals)
        self.pmi = pmi
        if pmi is not None:
            self.version = "2-pmi"  # another score: keep its evaluations apart

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> GroundednessEvaluator:
        """Build from policy options; `embedding`, `judge` and `pmi` switch on the extras."""
        extras = {k: options[k] for k in ("embedding", "judge") if options.get(k)}
        plain = {k: v for k, v in options.items() if k not in ("embedding", "judge", "pmi")}
        kinds = [plain.get("task"), *(plain.get("tasks") or {}).values()]
        if any(k not in (None, *TASK_KINDS) for k in kinds):
            raise TypeError(f"task kinds are {', '.join(TASK_KINDS)}")
        cutoffs = [plain.get("threshold"), *(plain.get("thresholds") or {}).values()]
        if any(c is not None and not 0.0 <= float(c) <= 1.0 for c in cutoffs):
            raise TypeError("thresholds are scores between 0 and 1")
        pmi = None
        if options.get("pmi"):
            from evaluators.grounding_pmi import build_pmi  # loads torch: only when asked

            pmi = build_pmi(options["pmi"])
        return cls(GroundednessOptions(**plain), build_signals(extras), pmi)

    def threshold(
        self, kind: str, segment: str | None = None, calibration: Calibration | None = None
    ) -> float:
        """Return the pass threshold: the segment's, the kind's, the policy's, or measured."""
        per_key = self.options.thresholds or {}
        for key in (segment, kind):
            if key is not None and key in per_key:
                return float(per_key[key])
        if self.options.threshold is not None:
            return self.options.threshold
        return (calibration or DEFAULT_CALIBRATIONS[kind]).threshold

    def applies(self, request: RequestView) -> bool:
        """Apply only where the request gave the model something to be grounded in."""
        return has_context(request)

    def evaluate(self, generation: GenerationView, request: RequestView) -> EvalResult:
        """Score the answer's claims against the context."""
        opts = self.options
        sources = context_sources(
            request, include_system=opts.include_system, include_user=opts.include_user
        )
        context = index_context(sources)
        claims = extract_claims(answer_prose(generation.output))
        supports = [self.support(claim, context) for claim in claims]
        features = answer_features(claims, supports, context) if claims else {}
        adjusted = supports
        for signal in self.signals:
            adjusted = signal.adjust(adjusted, sources)
        segment = request.inputs.get("segment")
        segment = segment if isinstance(segment, str) else None
        kind = task_kind(request, opts.task or (opts.tasks or {}).get(segment or ""))
        calibration = DEFAULT_CALIBRATIONS[kind]
        if self.pmi is not None and claims and kind in PMI_CALIBRATIONS:
            context_text, prompt = pmi_inputs(request.messages, sources)
            features |= self.pmi.features(context_text, prompt, [c.text for c in claims])
            calibration = PMI_CALIBRATIONS[kind]
        threshold = self.threshold(kind, segment, calibration)
        return self._result(calibration, kind, threshold, features, supports, adjusted)

    def support(self, claim: Claim, context: ContextIndex) -> ClaimSupport:
        """Return the deterministic support of one claim."""
        opts = self.options
        missing = [t for t in claim.content if t not in context.vocabulary]
        token_cov = 1.0 - len(missing) / len(claim.content)
        ngram_cov = _bigram_coverage(claim.tokens, context, default=token_cov)
        soft = opts.token_weight * token_cov + (1.0 - opts.token_weight) * ngram_cov
        numbers = sorted({n for n in claim.numbers if n not in context.numbers})
        entities = [
            text
            for text, e in claim.entities
            if not _entity_found(e, context, opening=claim.text.startswith(text))
        ]
        quotes = [text for text, q in claim.quotes if not context.contains_phrase(q)]
        hard = len(numbers) + len(entities) + len(quotes)
        return ClaimSupport(
            text=claim.text,
            score=soft * opts.hard_penalty**hard,
            supported=hard == 0 and soft >= opts.claim_threshold,
            token_coverage=token_cov,
            ngram_coverage=ngram_cov,
            missing_tokens=sorted(set(missing)),
            missing_numbers=numbers,
            missing_entities=entities,
            missing_quotes=quotes,
        )

    def _result(
        self,
        calibration: Calibration,
        kind: str,
        threshold: float,
        features: dict[str, float],
        supports: list[ClaimSupport],
        adjusted: list[ClaimSupport],
    ) -> EvalResult:
        score = calibrated_score(features, calibration) if supports else 1.0
        # An extra signal (embedding, judge) scales the score by how much it moved the
        # claims' lexical support, and a claim it rejects fails the answer.
        score *= _signal_factor(supports, adjusted)
        unsupported = [s for s in adjusted if not s.supported]
        rejected = [s for s in adjusted if s.signals.get("judge_supported") is False]
        strict_ok = len(unsupported) <= self.options.max_unsupported_claims
        passed = score >= threshold and not rejected and (strict_ok or not calibration.strict)
        details = {
            "task": kind,
            "threshold": threshold,
            "claims": len(adjusted),
            "lexical_score": round(_weighted(adjusted), 6),
            "features": {k: round(v, 6) for k, v in features.items()},
            "unsupported": [s.text for s in unsupported],
            "per_claim": [asdict(s) for s in adjusted],
        }
        return EvalResult(score=round(score, 6), passed=passed, details=details)


def _weighted(supports: Sequence[ClaimSupport]) -> float:
    weights = [max(1, len(s.text.split())) for s in supports]
    if not supports:
        return 1.0
    return sum(w * s.score for w, s in zip(weights, supports, strict=True)) / sum(weights)


def _signal_factor(supports: Sequence[ClaimSupport], adjusted: Sequence[ClaimSupport]) -> float:
    before = _weighted(supports)
    return min(1.0, _weighted(adjusted) / before) if before > 0 else 1.0


def _bigram_coverage(tokens: tuple[str, ...], context: ContextIndex, *, default: float) -> float:
    pairs = [
        p
        for p in itertools.pairwise(tokens)
        if not (p[0] in _STOP_PAIR_TOKENS and p[1] in _STOP_PAIR_TOKENS)
    ]
    if not pairs:
        return default
    return sum(p in context.bigrams for p in pairs) / len(pairs)


def _entity_found(entity: tuple[str, ...], context: ContextIndex, *, opening: bool) -> bool:
    # A name must occur as written: "Amy Johnson" is not "Amy Jo Johnson", and "Brooks
    # Garth" is not "Garth Brooks". Middle initials are the one slack allowed, and so is
    # a capitalised word that only opens the sentence ("Actually Drew Brees ...").
    if context.contains_phrase(entity) or context.contains_phrase(entity, loose=True):
        return True
    return opening and len(entity) > 2 and context.contains_phrase(entity[1:])
