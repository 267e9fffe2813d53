"""Fit the groundedness calibrations (`evaluators.grounding_score`) on development rows.

One L2-regularised logistic regression per task kind over the answer-level features the
evaluator reports, and a default threshold that fails FALSE_FAIL_QUANTILE of the
development rows' right answers. Validation and reserved rows are never seen here.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from halueval_rows import Row, request_for
from scipy.optimize import minimize

from evaluators.base import Evaluator, GenerationView
from evaluators.grounding_score import FEATURES

KIND = {"qa": "qa", "summarization": "summary", "dialogue": "dialogue"}
FALSE_FAIL_QUANTILE = 0.08
L2 = 0.01
# Copied runs are what HaluEval's right QA answers are made of, not what a correct
# paraphrase or a reply built from a tool result looks like: with them the QA fit failed
# faithful paraphrases, so they are reported but carry no weight.
COPY_FEATURES = frozenset({"bigram_coverage", "fragment_coverage", "fragment_density"})
# More support may only raise the score, more misses only lower it: a fit may not learn
# that a dataset's right answers happen to carry more unfound names (its summaries do).
SIGN = {
    "coverage": 1,
    "bigram_coverage": 1,
    "min_claim_coverage": 1,
    "missing_entities": -1,
    "missing_numbers": -1,
    "fragment_coverage": 1,
    "fragment_density": 1,
    "novel_tokens": -1,
    "sentence_coverage": 1,
    "sentence_misses": -1,
}


def fit_calibrations(
    evaluator: Evaluator, splits: dict[str, tuple[list[Row], list[Row]]]
) -> dict[str, Any]:
    """Return {kind: {bias, weights, threshold}} fitted on each split's development rows."""
    fitted = {}
    for split, (dev, _val) in splits.items():
        features, labels = _features(evaluator, dev)
        bias, weights = _logistic(features, labels)
        right = features[labels == 1] @ weights + bias
        scores = 1 / (1 + np.exp(-right))
        fitted[KIND[split]] = {
            "bias": round(bias, 4),
            "weights": [round(float(w), 4) for w in weights],
            # Rounded down: right answers often tie at the quantile, and must stay passing.
            "threshold": math.floor(1000 * float(np.quantile(scores, FALSE_FAIL_QUANTILE))) / 1000,
            "rows": len(labels),
        }
    return fitted


def _features(evaluator: Evaluator, rows: list[Row]) -> tuple[np.ndarray, np.ndarray]:
    matrix, labels = [], []
    for row in rows:
        side = GenerationView("candidate", output=row.answer, finish_reason="stop")
        found = evaluator.evaluate(side, request_for(row)).details["features"]
        if found:  # an answer without claims is scored 1.0 whatever the weights
            matrix.append([found[name] for name in FEATURES])
            labels.append(row.label)
    return np.asarray(matrix, float), np.asarray(labels)


def _bound(name: str) -> tuple[float | None, float | None]:
    if name in COPY_FEATURES:
        return (0.0, 0.0)
    return (0.0, None) if SIGN[name] > 0 else (None, 0.0)


def _logistic(x: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    # Standardised for the fit, so the L2 penalty treats every feature alike.
    mean, scale = x.mean(axis=0), x.std(axis=0) + 1e-9
    z = np.hstack([(x - mean) / scale, np.ones((len(x), 1))])

    def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
        p = 1 / (1 + np.exp(-(z @ w)))
        eps = 1e-12
        value = -np.mean(y * np.log(p + eps) + (1 - y) * np.log(1 - p + eps))
        grad = z.T @ (p - y) / len(y)
        grad[:-1] += 2 * L2 * w[:-1]
        return float(value + L2 * np.sum(w[:-1] ** 2)), grad

    bounds = [_bound(name) for name in FEATURES] + [(None, None)]
    w = minimize(loss, np.zeros(z.shape[1]), jac=True, method="L-BFGS-B", bounds=bounds).x
    weights = w[:-1] / scale
    return float(w[-1] - np.sum(weights * mean)), weights
