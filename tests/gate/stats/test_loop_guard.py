"""The loop guardrail: acceptance length near k + 1 with collapsing distinct-2 kills.

A candidate caught in repetition loops has acceptance going up, not down: the collapse
detector (acceptance fallen below a share of its warm-up level) and the acceptance floor
both pass it. The loop guardrail reads each pair's signature against the paired
baseline answer and kills on a proven share of looping pairs, at its own share of the
kill budget; an A/A stream, and a healthy n-gram candidate, are never killed by it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from gate.db.enums import Decision
from gate.stats.arms_replay import replay_arms
from gate.stats.policy import Policy
from gate.stats.registry import alpha_kill_each, find, kill_slots
from gate.stats.replay import replay

POLICY = Policy.model_validate(
    {"segments": ["chat", "code"], "warmup_pairs": 50, "min_pairs": 100_000,
     "min_duration_s": 0, "stages": [100.0]}
)  # fmt: skip
START = datetime(2026, 11, 1, tzinfo=UTC)


def side(rng: np.random.Generator, *, loops: bool, spec: bool) -> dict:
    """One call: latency, quality, and its tokens and answer's distinct-2."""
    out = {"ttft_s": rng.lognormal(-1.5, 0.2), "tpot_s": rng.lognormal(-4, 0.2),
           "e2e_s": rng.lognormal(1, 0.2), "status": "ok", "evals": {"task": True},
           "output_tokens": 120, "distinct_2": rng.uniform(0.8, 0.95)}  # fmt: skip
    if not spec:
        return {**out, "draft_tokens": 0, "accepted_tokens": 0}
    if loops:
        # 13 passes of k = 8 drafts, every draft taken: L = 117 / 13 = 9 = k + 1, and the
        # answer repeats itself (distinct-2 a fraction of the baseline's).
        return {**out, "draft_tokens": 104, "accepted_tokens": 104, "output_tokens": 117,
                "distinct_2": rng.uniform(0.1, 0.3)}  # fmt: skip
    # A healthy n-gram call: 60 passes, 80 drafted, 60 taken (rate 0.75, L = 2).
    return {**out, "draft_tokens": 80, "accepted_tokens": 60}


def records(seed: int, *, loop_share: float, n: int = 1500, spec: bool = True) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        loops = i >= POLICY.warmup_pairs and rng.random() < loop_share
        created = START + timedelta(seconds=i)
        out.append({
            "segment": "code" if i % 3 else "chat", "created_at": created.isoformat(),
            "evaluated_at": created.isoformat(), "is_control": False,
            "baseline": side(rng, loops=False, spec=False),
            "candidate": side(rng, loops=loops, spec=spec),
        })  # fmt: skip
    return out


def test_the_guardrail_takes_its_own_share_of_the_kill_budget():
    g = find("loop")
    assert g is not None and g.kill_shares(POLICY, 0, canary=False) == 1
    off = Policy.model_validate({**POLICY.model_dump(), "guardrails": {"loop": {"enabled": False}}})
    # One share per tested segment (all, chat, code); the alphas are split, not added.
    assert kill_slots(POLICY) == kill_slots(off) + 3
    assert alpha_kill_each(POLICY) * kill_slots(POLICY) == pytest.approx(POLICY.alpha_kill)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_looping_candidate_the_collapse_detector_misses_is_killed_for_loops(seed):
    got = replay(records(seed, loop_share=0.15), POLICY)
    assert got.decision is Decision.KILL
    codes = got.verdict.reason_codes
    assert any(c.startswith("kill:loop") for c in codes), codes
    # Acceptance rose: neither the floor nor the collapse detector saw harm.
    assert not any("acceptance" in c for c in codes), codes
    assert "loop" in got.verdict.summary or "repetition" in got.verdict.summary


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_healthy_candidate_and_an_aa_stream_are_not_killed_for_loops(seed):
    for stream in (records(seed, loop_share=0.0), records(seed, loop_share=0.0, spec=False)):
        got = replay(stream, POLICY)
        assert not any("loop" in c for c in got.verdict.reason_codes), got.verdict.reason_codes


def test_an_arm_that_loops_is_killed_on_its_own():
    looping, healthy = records(4, loop_share=0.2), records(5, loop_share=0.0)
    arms = [{**r, "arm": "k8"} for r in looping] + [{**r, "arm": "k2"} for r in healthy]
    got = {a.name: a for a in replay_arms(arms, POLICY).arms}
    assert got["k8"].decision is Decision.KILL
    assert any(c.startswith("kill:loop") for c in got["k8"].verdict.reason_codes)
    assert got["k2"].decision is not Decision.KILL


def lossless_records(seed: int, *, own_loops: float, n: int = 1500) -> list[dict]:
    """A sampled, lossless candidate: each side's answer loops on its own (the model's
    habit at temperature > 0) with the same probability, independently; the candidate's
    looping answers are drafted whole by the n-gram drafter, as repetitive text is."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        created = START + timedelta(seconds=i)
        base = side(rng, loops=False, spec=False)
        if rng.random() < own_loops:
            base = {**base, "distinct_2": rng.uniform(0.1, 0.3)}
        cand = side(rng, loops=bool(rng.random() < own_loops), spec=True)
        out.append({
            "segment": "code" if i % 3 else "chat", "created_at": created.isoformat(),
            "evaluated_at": created.isoformat(), "is_control": False,
            "baseline": base, "candidate": cand,
        })  # fmt: skip
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_lossless_candidate_whose_model_loops_on_its_own_is_not_killed_for_loops(seed):
    # Both sides loop alike (same output distribution): no harm of the candidate's, so the
    # guardrail's kill must keep its level; counting only the candidate's loops kills it.
    got = replay(lossless_records(seed, own_loops=0.1), POLICY)
    assert not any(c.startswith("kill:loop") for c in got.verdict.reason_codes), (
        got.verdict.reason_codes
    )
