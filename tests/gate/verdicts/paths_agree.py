"""The pair streams and agreement checks the `test_paths_agree*` files share.

Random streams of pairs: both modes, declared and undeclared segments, control pairs,
missing sides, every side status (ok, error, timeout, fallback, dropped, cancelled),
evaluators passing, failing or not evaluable, greedy pairs, acceptance, per-token
exactness sums on some sides (the candidate's tested, the baseline's the control), sampled sides
(eligible or not: greedy, other limits, a shared seed, cut, logprobs on one side only or
incomplete). The checks compare two paths' statistics and verdicts to 1e-9 relative.
"""

from __future__ import annotations

import itertools
import uuid
from dataclasses import asdict, fields, replace
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from hypothesis import strategies as st

from gate.exactness_fit import BINS
from gate.parity import answer_stats
from gate.stats.columns import PairColumns
from gate.stats.gate_stats import BandStats, GateStats
from gate.stats.policy import Policy
from gate.stats.verdict import VerdictResult
from tests.gate.stats.test_sql import as_floats

POLICY = Policy.model_validate(
    {"segments": ["chat", "code"], "warmup_pairs": 6, "min_pairs": 10, "min_duration_s": 0,
     "stages": [100.0], "guardrails": {"output_parity": {"enabled": True, "min_scale_pairs": 2}}}
)  # fmt: skip
START = datetime(2025, 5, 1, tzinfo=UTC)
STATUSES = ["ok", "ok", "ok", "error", "timeout", "fallback", "dropped", "cancelled"]
RTOL = 1e-9
_ids = itertools.count()  # the pairs of every example share one session's table

latency = st.one_of(st.none(), st.floats(0.001, 30.0))
# A call's per-token exactness sums (`gate.exactness_fit.TokenFit.as_dict`), lossy or not.
# The shares sum to n, as `TokenFit.from_dict` requires.
# The most-likely test's sums: `off` of the n tokens, chances `off_p`, their squares
# `off_p2` (at most `off_p`; absent: legacy).
exactness = st.builds(
    lambda n, cut, w, off: {"n": n, "cut": cut, "skipped": 0, "bins": [n * x / sum(w) for x in w],
                            **({} if off is None else {"off": int(off[0] * n),
                                                       "off_p": off[1] * n,
                                                       "off_p2": off[1] * off[2] * n})},
    st.integers(0, 80),
    st.integers(0, 3),
    st.lists(st.floats(0.01, 6.0), min_size=BINS, max_size=BINS),
    st.one_of(st.none(), st.tuples(st.floats(0.0, 1.0), st.floats(0.0, 1.0),
                                   st.floats(0.0, 1.0))),
)  # fmt: skip
side = st.fixed_dictionaries(
    {
        "ttft_s": latency,
        "tpot_s": latency,
        "e2e_s": latency,
        "status": st.sampled_from(STATUSES),
        "evals": st.fixed_dictionaries(
            {"task": st.sampled_from([True, False, None])},
            optional={"greedy_parity": st.booleans(), "schema": st.booleans()},
        ),
        "draft_tokens": st.sampled_from([0, 10, 100]),
        "accepted_tokens": st.integers(0, 120),
        "exactness": st.one_of(st.none(), st.none(), exactness),
        # A user's thumbs on the side (-1 down, 0 neutral, 1 up), stored as a rating.
        "feedback": st.sampled_from([None, None, -1, 0, 1]),
    }
)
# Sampled-output parity's side fields; `words` become the answer (`output`), from which
# the record's distinct-2 is computed as the export does.
sampling = st.fixed_dictionaries(
    {
        "temperature": st.sampled_from([0.8] * 9 + [0.0]),
        "top_p": st.just(1.0),
        "max_tokens": st.sampled_from([64] * 9 + [32]),
        "seed": st.sampled_from([None] * 9 + [7]),
        "finish_reason": st.sampled_from(["stop"] * 6 + ["eos"] * 2 + ["length", None]),
        "words": st.lists(st.sampled_from("abcd"), max_size=8),
        "logprobs": st.sampled_from(["all"] * 8 + ["none", "short"]),
        "mean": st.floats(-3.0, 0.0),
    }
)


def sampled_side(pair: tuple[dict, dict]) -> dict:
    plain, s = pair
    n = len(s["words"])
    counted = {"all": n, "none": None, "short": max(n - 1, 0)}[s["logprobs"]]
    fields = {k: s[k] for k in ("temperature", "top_p", "max_tokens", "seed", "finish_reason")}
    return (
        plain
        | fields
        | {
            "output": " ".join(s["words"]),
            "distinct_2": answer_stats(s["words"]).distinct_2,
            "output_tokens": n,
            "logprob_tokens": counted,
            "logprob_sum": None if counted is None else s["mean"] * counted,
        }
    )


sampled = st.tuples(side, sampling).map(sampled_side)
side = st.one_of(side, sampled, sampled, sampled)
pair = st.fixed_dictionaries(
    {
        "segment": st.sampled_from(["chat", "code", "unlisted", "other-one"]),
        "baseline": st.one_of(st.none(), side, side, side),
        "candidate": st.one_of(st.none(), side, side, side),
        "lag_s": st.integers(0, 40),
        "control": st.integers(0, 9),
        # Replay breaks ties in `evaluated_at` by pair id as the fold does; without the
        # same ids on both paths the warm-up and the pooled series were picked at random.
        # The id's leading bits (its place in a tie); `as_records` makes it unique.
        "id_rank": st.integers(0, 2**32 - 1),
        # Most pairs their own episode; the others in a few shared ones (issue 39).
        "episode": st.sampled_from([None] * 5 + ["a", "b", "c"]),
    }
)


def as_records(raw: list[dict], episodes: bool = True) -> list[dict]:
    records = []
    for i, r in enumerate(raw):
        base, cand = r["baseline"], r["candidate"]
        control = r["control"] == 0 and base is not None and cand is not None
        if control:
            cand = {**cand, "draft_tokens": 0, "accepted_tokens": 0}
        records.append(
            {
                "pair_id": str(uuid.UUID(int=(r["id_rank"] << 96) | next(_ids))),
                "segment": r["segment"],
                "created_at": (START + timedelta(seconds=i)).isoformat(),
                "evaluated_at": (START + timedelta(seconds=i + r["lag_s"])).isoformat(),
                "is_control": control,
                "episode": r.get("episode") if episodes else None,
                "baseline": base,
                "candidate": cand,
            }
        )
    return records


def stacked(cols: PairColumns) -> PairColumns:
    """The columns with a leading runs axis of two runs (as `simulate` holds them)."""
    changes = {}
    for f in fields(cols):
        value = getattr(cols, f.name)
        if isinstance(value, np.ndarray):
            changes[f.name] = np.stack([value, value])
        elif isinstance(value, dict):
            changes[f.name] = {k: np.stack([v, v]) for k, v in value.items()}
    return replace(cols, **changes)


def assert_same_stats(got: GateStats, want: GateStats, *, skip: set[str] = frozenset()) -> None:
    for name in ("n_pairs", "n_dropped", "n_unmatched", "elapsed_s"):
        assert float(np.asarray(getattr(got, name))) == pytest.approx(
            float(np.asarray(getattr(want, name))), rel=RTOL, abs=1e-9
        ), name
    assert bool(np.asarray(got.warmed_up)) is bool(np.asarray(want.warmed_up))
    expected = {k: v for k, v in want.cells.items() if k[0] not in skip}
    assert set(got.cells) == set(expected)
    for key, cell in expected.items():
        assert as_floats(got.cells[key]) == pytest.approx(as_floats(cell), rel=RTOL, abs=1e-9), key
    assert {k: float(np.asarray(v)) for k, v in got.collapse.items()} == pytest.approx(
        {k: float(np.asarray(v)) for k, v in want.collapse.items()}, rel=RTOL, abs=1e-9
    )
    assert_same_bands(got.bands, want.bands)


def assert_same_bands(got: BandStats | None, want: BandStats | None) -> None:
    assert (got is None) is (want is None)
    if got is None or want is None:
        return
    assert (got.labels, got.next_share) == (want.labels, want.next_share)
    assert band_floats(got) == pytest.approx(band_floats(want), rel=RTOL, abs=1e-9)


def band_floats(bands: BandStats) -> dict[str, float]:
    """Each band's gain sums and load sums, flattened."""
    out = {}
    for i, (gain, cand, base) in enumerate(
        zip(bands.gain, bands.candidate_load, bands.baseline_load, strict=True)
    ):
        out |= as_floats(gain, f"{i}.gain.")
        out |= {f"{i}.candidate": float(np.asarray(cand)), f"{i}.baseline": float(np.asarray(base))}
    return out


def assert_same_verdict(got: VerdictResult, want: VerdictResult, skip: set[str] = frozenset()):
    assert (got.decision, got.reason_codes, got.n_pairs) == (
        want.decision,
        want.reason_codes,
        want.n_pairs,
    )
    mine = [asdict(c) for c in got.cells if c.metric not in skip]
    theirs = [asdict(c) for c in want.cells if c.metric not in skip]
    assert len(mine) == len(theirs)
    for a, b in zip(mine, theirs, strict=True):
        numbers = {k for k, v in b.items() if isinstance(v, float)}
        assert {k: a[k] for k in numbers} == pytest.approx(
            {k: b[k] for k in numbers}, rel=RTOL, abs=1e-9
        ), b
        assert {k: v for k, v in a.items() if k not in numbers} == {
            k: v for k, v in b.items() if k not in numbers
        }
    assert len(got.bands) == len(want.bands)
    for a, b in zip(got.bands, want.bands, strict=True):
        numbers = {k: v for k, v in asdict(b).items() if isinstance(v, float)}
        assert {k: asdict(a)[k] for k in numbers} == pytest.approx(numbers, rel=RTOL, abs=1e-9), b
        assert {k: v for k, v in asdict(a).items() if k not in numbers} == {
            k: v for k, v in asdict(b).items() if k not in numbers
        }


# A side that mostly completes, with plausible latencies and drafts; `sampled_ok` the
# same side sampled (its parity fields drawn as `sampling` draws them).
ok_side = st.fixed_dictionaries(
    {
        "ttft_s": st.floats(0.1, 0.3), "tpot_s": st.floats(0.01, 0.03),
        "e2e_s": st.floats(1.0, 3.0), "status": st.sampled_from(["ok"] * 9 + ["error"]),
        "evals": st.just({"task": True}), "draft_tokens": st.just(10),
        "accepted_tokens": st.integers(0, 10),
    }
)  # fmt: skip
sampled_ok = st.tuples(ok_side, sampling).map(sampled_side)


def _run(stats: GateStats, run: int) -> GateStats:
    """Return run `run` of statistics with a leading runs axis."""
    return _pick(stats, run)  # type: ignore[no-any-return]


def _pick(value, run):
    if isinstance(value, np.ndarray):
        return value[run] if value.ndim else value
    if isinstance(value, dict):
        return {k: _pick(v, run) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_pick(v, run) for v in value)
    if hasattr(value, "__dataclass_fields__"):
        return replace(value, **{f.name: _pick(getattr(value, f.name), run) for f in fields(value)})
    return value
