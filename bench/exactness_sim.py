"""Per-token exactness through the whole gate, with the engine's real verifiers.

The target is `gate.engines.answer_pools.CopyModel` (64 tokens, a copy bonus that n-gram
drafts from the prompt exploit, a rising end-of-sequence logit), decoded by
`gate.engines.decode.speculate` with the real `NgramDrafter` (k = 8) at temperature 0.8,
with the engine's `TokenLogprobs` recording each emitted token's 20 most likely
alternatives as vLLM's default `raw_logprobs` would (the model at temperature 1; the gate
applies the request's temperature and top_p). Each answer becomes the stored statistics
through the public `gate.exactness.exactness_fields` (OpenAI-format `logprobs` objects),
and its exact mean per-token total variation is measured with `gate.engines.verify_tv`.

Pools of answers per verifier are generated once; each simulated rollout (the default
policy, every guardrail, looks every 10 pairs) draws pairs from `gate.stats.simulated_pairs`'s
latency and quality model and puts a pool answer's exactness statistics on the candidate
side (and on the baseline side of `control_share` of the pairs, from plain sampling).
Lossy verifiers run with a candidate 20 % faster (so a gate blind to them would promote);
`exact-faster` is the exact verifier with the same gain (it should be promoted).

The exact verifier runs as an A/A with FRESH tokens: a finite pool reused across 5,000
pairs has its own sampling noise (about 0.005 of set deviation at 20k tokens), which
every run would share. So each of its runs draws, at the positions the real decode loop
recorded (each position's known outcomes and their probabilities after temperature, as
`gate.exactness_position.place` reads them), a fresh token from that distribution: the exact
verifier's output distribution, which `gate.engines.verify_tv` shows equals the
target's. Each run's tokens are then new draws, as on live traffic.

Usage: python bench/exactness_sim.py [--runs 400] [--prompts 16] [--answers 120] [--seed 7]
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gate import exactness, exactness_position
from gate.engines.answer_pools import EOS, MAX_TOKENS, SPEC, TEMPERATURE, VOCAB, CopyModel, decode
from gate.engines.decode import TokenLogprobs
from gate.engines.spec import SpecStats
from gate.exactness import exactness_fields
from gate.exactness_fit import BINS
from gate.stats.cumulative import looks_every, to_stats
from gate.stats.policy import Policy
from gate.stats.record_columns import FIT_WIDTH
from gate.stats.rule import Code, apply_rule
from gate.stats.simulate import clopper_pearson
from gate.stats.simulated_pairs import Scenario, draw_pairs

sys.path.insert(0, str(Path(__file__).parent))
from verifier_tv import MeasuringSampler

TOP = 20


def alternatives(top: list[tuple[int, float]]) -> list[dict[str, Any]]:
    """Return a position's alternatives in the OpenAI shape."""
    return [{"token": str(i), "logprob": v} for i, v in top]


def outcomes(top: list[tuple[str, float]], top_p: float) -> tuple[np.ndarray, float] | None:
    """Return a position's known outcomes' interval ends in [0, 1] and the most likely's
    probability (0 when no listed token is kept), or None (untested)."""
    weights = exactness_position._merged(exactness.trusted(top, None))
    known = exactness_position._raw(weights, exactness_position.Sampling(TEMPERATURE, top_p))
    kept = sorted((w for t, w in known.kept.items() if t != str(EOS)), reverse=True)
    tail = known.tail or 0.0
    total = sum(kept) + tail
    if total <= 0.0:
        return None
    ends = np.cumsum([*kept, tail]) / total
    ends[-1] = 1.0
    return ends, (kept[0] / total if kept else 0.0)


def answer(prompt: list[int], background: Any, verify: str, gen: Any, top_p: float) -> Any:
    """Decode one answer; return its exactness statistics and its tokens' mean TV."""
    model = CopyModel(background, len(prompt), copy_bonus=2.0)
    sampler = MeasuringSampler(torch, TEMPERATURE, top_p, gen, verify)
    spec = verify != "plain"
    recorder = TokenLogprobs(torch, top=TOP)
    stats = SpecStats(SPEC.num_speculative_tokens) if spec else None
    steps = decode(model, prompt, sampler, stats=stats, logprobs=recorder)
    tokens: list[int] = []
    for produced in steps:
        stop = False
        for token in produced:
            if token == EOS:
                stop = True
                break
            tokens.append(token)
        if stop or len(tokens) >= MAX_TOKENS:
            break
    steps.close()
    tokens = tokens[:MAX_TOKENS]
    content: list[dict[str, Any]] = [
        {"token": str(t), "logprob": lp, "top_logprobs": alternatives(top)}
        for t, lp, top in (recorder.entries or [])[: len(tokens)]
    ]
    fit = exactness_fields(
        {"content": content}, temperature=TEMPERATURE, top_p=top_p, mode="raw", eos={str(EOS)}
    )
    assert fit is not None
    tvs = sampler.tvs[: len(tokens) + 1]
    places = [outcomes([(a["token"], a["logprob"]) for a in c["top_logprobs"]], top_p)
              for c in content]  # fmt: skip
    return fit, float(np.sum(tvs)), len(tvs), [p for p in places if p is not None]


def build_pool(verify: str, prompts: int, answers: int, seed: int, top_p: float) -> dict[str, Any]:
    """Return `prompts x answers` answers' statistics (rows: n, cut, bins) and their TV."""
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed + hash(verify) % 1000)
    rows, tv_sum, tv_n, starts = [], 0.0, 0, []
    places: list[tuple[np.ndarray, float]] = []
    for _ in range(prompts):
        background = torch.from_numpy(rng.normal(0.0, 1.5, (VOCAB, VOCAB))).float()
        base = rng.integers(1, VOCAB, 24).tolist()
        prompt = base + base[: rng.integers(8, 20)]
        for _ in range(answers):
            fit, tv, n, where = answer(prompt, background, verify, gen, top_p)
            rows.append([fit.tokens, fit.cut, *fit.bins, fit.off, fit.off_p, fit.off_p2])
            tv_sum, tv_n = tv_sum + tv, tv_n + n
            starts.append(len(places))
            places += where
    ends = np.ones((len(places), TOP + 2))
    for i, (e, _) in enumerate(places):
        ends[i, : e.size] = e
    first = np.asarray([f for _, f in places])
    return {"rows": np.asarray(rows), "tv": tv_sum / max(tv_n, 1), "ends": ends,
            "first": first, "starts": np.asarray([*starts, len(places)])}  # fmt: skip


def fresh_rows(pool: dict[str, Any], picks: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Return exactness rows for the picked answers, with fresh draws at their positions."""
    starts, ends = pool["starts"], pool["ends"]
    lo, hi = starts[picks.ravel()], starts[picks.ravel() + 1]
    lengths = hi - lo
    index = np.repeat(lo - np.cumsum(np.r_[0, lengths[:-1]]), lengths) + np.arange(lengths.sum())
    rows = ends[index]
    u = rng.random(index.size)
    k = (rows < u[:, None]).sum(axis=1)  # the outcome whose interval holds u
    right = rows[np.arange(index.size), k]
    left = np.where(k > 0, rows[np.arange(index.size), np.maximum(k - 1, 0)], 0.0)
    edges = np.arange(BINS + 1) / BINS
    overlap = np.clip(
        np.minimum(right[:, None], edges[1:]) - np.maximum(left[:, None], edges[:-1]), 0, None
    )
    shares = overlap / np.maximum(right - left, 1e-15)[:, None]
    out = np.zeros((picks.size, FIT_WIDTH))
    owner = np.repeat(np.arange(picks.size), lengths)
    np.add.at(out[:, 2 : 2 + BINS], owner, shares)
    # The most-likely test: the first outcome is k = 0 where a listed token is kept.
    first = pool["first"][index]
    np.add.at(out[:, 2 + BINS], owner, ~((k == 0) & (first > 0)))
    np.add.at(out[:, 3 + BINS], owner, 1.0 - first)
    np.add.at(out[:, 4 + BINS], owner, (1.0 - first) ** 2)
    out[:, 0] = lengths
    return out.reshape(*picks.shape, FIT_WIDTH)


def run_gate(
    pool: dict[str, Any],
    plain: dict[str, Any],
    spec: Scenario,
    policy: Policy,
    runs: int,
    seed: int,
    *,
    fresh: bool = False,
) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
    """Run the whole gate on `runs` rollouts; return first decisive codes and pairs."""
    rng = np.random.default_rng(seed)
    looks = looks_every(spec.pairs, spec.every)
    share = policy.guardrails.exactness.control_share
    codes, at, reasons = [], [], dict[str, int]()
    chunk = max(1, 300_000 // spec.pairs)
    for start in range(0, runs, chunk):
        n = min(chunk, runs - start)
        cols = draw_pairs(spec, policy, n, rng)
        shape = (n, spec.pairs)
        picks = rng.integers(0, len(pool["rows"]), shape)
        cand = fresh_rows(pool, picks, rng) if fresh else pool["rows"][picks]
        base = plain["rows"][rng.integers(0, len(plain["rows"]), shape)]
        base = np.where((rng.random(shape) < share)[..., None], base, np.nan)
        cols = dataclasses.replace(cols, exactness=np.stack([base, cand], axis=-2))
        ev = apply_rule(policy, to_stats(cols, policy, looks))
        decisive = ev.code != Code.CONTINUE
        first = np.where(decisive.any(axis=-1), decisive.argmax(axis=-1), -1)
        rows = np.arange(n)
        code = np.where(first >= 0, ev.code[rows, first], Code.CONTINUE)
        codes.append(code)
        at.append(np.where(first >= 0, looks[first], np.nan))
        for r in rows[code == Code.KILL]:
            for key, flag in ev.harmful.items():
                if bool(np.asarray(flag)[r, first[r]]):
                    reasons[key[0]] = reasons.get(key[0], 0) + 1
    return np.concatenate(codes), np.concatenate(at), reasons


def report(name: str, hits: np.ndarray) -> str:
    """Return a rate with its 95% Clopper-Pearson interval."""
    rate, lo, hi = clopper_pearson(int(hits.sum()), int(hits.size))
    return f"{rate:.4f} [{lo:.4f}, {hi:.4f}] ({int(hits.sum())}/{hits.size})"


VERIFIERS = (
    ("exact", 1.0), ("exact-faster", 1.0), ("biased-argmax", 1.0), ("redraw", 1.0),
    ("accept-t1", 1.0), ("accept-bf16", 1.0), ("ignore-top-p", 0.9),
)  # fmt: skip


def main() -> None:
    """Build the pools, run every verifier through the gate and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--answers", type=int, default=120)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--only", default=None, help="comma-separated verifiers to run")
    args = parser.parse_args()
    torch.set_num_threads(1)
    started = time.perf_counter()
    policy = Policy()
    plains = {}
    chosen = [v for v in VERIFIERS if args.only is None or v[0] in args.only.split(",")]
    for top_p in sorted({p for _, p in chosen}):
        plains[top_p] = build_pool("plain", args.prompts, args.answers, args.seed, top_p)
    print(f"bins {BINS}, top_logprobs {TOP}, raw mode, T {TEMPERATURE}; policy exactness "
          f"{policy.guardrails.exactness.model_dump()}")  # fmt: skip
    print("| verifier | top_p | mean per-token TV | tested tokens / answer | killed | "
          "promoted | pairs to kill (median, 90th) | kills by guardrail |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for verify, top_p in chosen:
        engine = verify.removesuffix("-faster")
        pool = build_pool(engine, args.prompts, args.answers, args.seed + 1, top_p)
        exact = engine == "exact"
        aa = verify == "exact"  # the A/A; every other scenario's candidate is 20 % faster
        spec = Scenario(verify, pairs=5000 if exact else 3000, tpot_ratio=1.0 if aa else 0.8)
        codes, at, reasons = run_gate(
            pool, plains[top_p], spec, policy, args.runs, args.seed + 2, fresh=exact
        )
        killed, promoted = codes == Code.KILL, codes == Code.PROMOTE
        q = np.nanpercentile(at[killed], [50, 90]) if killed.any() else (math.nan, math.nan)
        tokens = pool["rows"][:, 0].mean()
        print(f"| {verify} | {top_p} | {pool['tv']:.4f} | {tokens:.1f} | {report('', killed)} | "
              f"{report('', promoted)} | {q[0]:.0f}, {q[1]:.0f} | {reasons} |")  # fmt: skip
        sys.stdout.flush()
    print(f"total {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
