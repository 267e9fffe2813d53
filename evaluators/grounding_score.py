"""The calibrated groundedness score: answer-level features, a logistic fit per task kind.

The per-claim checks in `evaluators.groundedness` say *what* is unsupported; this module
turns them into one number that means the same on extractive answers, summaries and
dialogue replies: the estimated probability that the answer is grounded. The weights are
fitted on HaluEval development rows (never its validation or reserved rows) by
`bench/groundedness_halueval.py --fit`, one logistic model per task kind, and the
thresholds are the scores that fail at most ~8 % of the development rows' correct
answers. bench/results/history-groundedness.md has the measurements.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from evaluators.base import RequestView
from evaluators.claims import Claim, ClaimSupport, ContextIndex
from gate.request.messages import message_text

TASK_KINDS = ("qa", "summary", "dialogue")
FEATURES = (
    "coverage",  # share of content tokens found in the context (claim-length weighted)
    "bigram_coverage",  # share of content bigrams found in the context
    "min_claim_coverage",  # the worst claim's token coverage
    "missing_entities",  # log(1 + names and quotes not found as written)
    "missing_numbers",  # log(1 + numbers not found)
    "fragment_coverage",  # share of all tokens inside runs copied from the context
    "fragment_density",  # mean squared run length per token: long copied runs score high
    "novel_tokens",  # log(1 + distinct content tokens the context does not hold)
    "sentence_coverage",  # share of each claim's content tokens in its best context sentence
    "sentence_misses",  # log(1 + content tokens missing from each claim's best sentence)
)

# The optional model-based features (`evaluators.grounding_pmi`): a calibration with
# len(FEATURES) + 2 weights weighs them after FEATURES.
PMI_FEATURES = ("pmi_min", "pmi_mean")


@dataclass(frozen=True)
class Calibration:
    """A logistic model over FEATURES and the default pass threshold of one task kind."""

    bias: float
    weights: tuple[float, ...]
    threshold: float
    # Strict kinds also fail an answer with any unsupported claim (a changed number, name
    # or quote): right for extractive answers, too harsh for paraphrase (issue 30).
    strict: bool


# Fitted by `bench/groundedness_halueval.py --fit` on the development rows (seed 30).
DEFAULT_CALIBRATIONS: dict[str, Calibration] = {
    "qa": Calibration(
        -4.5347,
        (1.7008, 0.0, 1.6426, -1.7441, -1.0559, 0.0, 0.0, -1.2547, 3.1489, -1.7705),
        0.876,
        strict=True,
    ),
    "summary": Calibration(
        1.8298,
        (1.0514, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -0.5707, 3.225, -1.1884),
        0.3,
        strict=False,
    ),
    "dialogue": Calibration(
        2.3382,
        (0.0, 0.0, 0.0, -0.5891, -0.0846, 0.0, 0.0, -0.488, 0.0, -0.6128),
        0.29,
        strict=False,
    ),
}


def answer_features(
    claims: Sequence[Claim], supports: Sequence[ClaimSupport], context: ContextIndex
) -> dict[str, float]:
    """Return the answer-level features of its claims' support."""
    weights = [len(c.content) for c in claims]
    total = sum(weights)
    words = [t for c in claims for t in c.tokens]
    runs = [n for c in claims for n in context.fragments(c.tokens)]
    novel = {t for s in supports for t in s.missing_tokens}
    entities = sum(len(s.missing_entities) + len(s.missing_quotes) for s in supports)
    numbers = {n for s in supports for n in s.missing_numbers}
    held = [context.sentence_support(c.content) for c in claims]
    return {
        "coverage": sum(w * s.token_coverage for w, s in zip(weights, supports, strict=True))
        / total,
        "bigram_coverage": sum(w * s.ngram_coverage for w, s in zip(weights, supports, strict=True))
        / total,
        "min_claim_coverage": min(s.token_coverage for s in supports),
        "missing_entities": math.log1p(entities),
        "missing_numbers": math.log1p(len(numbers)),
        "fragment_coverage": sum(runs) / max(len(words), 1),
        "fragment_density": sum(n * n for n in runs) / max(len(words), 1),
        "novel_tokens": math.log1p(len(novel)),
        "sentence_coverage": sum(held) / total,
        "sentence_misses": math.log1p(total - sum(held)),
    }


def calibrated_score(features: Mapping[str, float], calibration: Calibration) -> float:
    """Return the estimated probability that the answer is grounded."""
    names = FEATURES if len(calibration.weights) == len(FEATURES) else FEATURES + PMI_FEATURES
    logit = calibration.bias + sum(
        w * features[name] for name, w in zip(names, calibration.weights, strict=True)
    )
    # Clamped so exp() cannot overflow on an extreme logit.
    return 1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, logit))))


def task_kind(request: RequestView, declared: str | None = None) -> str:
    """Return the request's task kind: as the policy declares it, else inferred.

    Inferred: an earlier assistant turn makes a dialogue; a last user message that asks
    for a summary, or none at all, makes a summary; anything else is question answering.
    """
    if declared in TASK_KINDS:
        return str(declared)
    # Assistant turns that said something (not bare tool calls) make it a conversation.
    if any(m.get("role") == "assistant" and message_text(m).strip() for m in request.messages):
        return "dialogue"
    users = [message_text(m) for m in request.messages if m.get("role") == "user"]
    if not users or not users[-1].strip() or _asks_for_summary(users[-1]):
        return "summary"
    return "qa"


def _asks_for_summary(text: str) -> bool:
    lowered = text.lower()
    return "summar" in lowered or "tl;dr" in lowered


# With the PMI signal switched on (`{"pmi": {}}`): FEATURES + PMI_FEATURES weights, fitted
# by `bench/groundedness_pmi.py --report` on development rows. Kinds not listed keep
# their lexical calibration and skip the model.
# Measured: on dialogue it adds nothing the lexical features did not already give
# (BENCHMARKS.md); on summaries the fit put zero weight on it, so summaries and QA skip it.
PMI_CALIBRATIONS: dict[str, Calibration] = {
    "dialogue": Calibration(
        1.7023,
        (0.0, 0.0, 0.0, -0.6185, -0.2143, 0.0, 0.0, -0.465, 0.0, -0.4039, 0.1158, 0.5194),
        0.297,
        strict=False,
    ),
}
