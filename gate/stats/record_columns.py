"""Pair records (the replay schema, `gate.stats.replay`) as the columns `to_stats` reads.

`columns` turns records into `PairColumns` in one pass; `fold_order` sorts them into the
gate's fold order first. The per-side fields read here: latencies, status, evaluators,
feedback, acceptance, load, the loop signature, per-token exactness, the episode and the
sampled-output parity fields (`parity_values`, which the pair's stamp also stores).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from itertools import pairwise
from typing import Any

import numpy as np

from gate.db.enums import GenerationStatus, Outcome, RolloutMode
from gate.errors import InputMalformed
from gate.exactness import BINS, TokenFit
from gate.parity import STATISTICS, Side, eligibility, side_alone
from gate.stats.acceptance_length import baseline_collapse, loop_outcome
from gate.stats.columns import PairColumns
from gate.stats.policy import Policy
from gate.stats.sequences import FloatArray, IntArray

STATUSES = {status.value: status for status in GenerationStatus}
Record = dict[str, Any]


def _seconds(value: Any) -> float:
    if isinstance(value, str):
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    return float(value)


def _seconds_or_none(side: Record, key: str) -> float | None:
    value = side.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{key} is not a number: {value!r}")
    return float(value)


class _Builder:
    """Accumulates columns record by record (one pass, plain lists)."""

    def __init__(self, policy: Policy, mode: RolloutMode) -> None:
        self.index = {name: i for i, name in enumerate(policy.segments)}
        self.greedy = policy.guardrails.greedy_mismatch.evaluator
        self.mode = mode
        self.rows: dict[str, list[Any]] = {k: [] for k in _COLUMNS.split()}
        self.evals: list[tuple[int, int, str, bool | None]] = []
        self.parity: list[list[float]] = []  # per pair: STATISTICS x (baseline, candidate)
        self.partial: list[bool] = []  # per pair: a side's log-probabilities fall short
        self.sampled = False
        self.exact: list[list[float]] = []  # per pair and side: n, cut, bins (NaN: none)
        self.tested = False
        self.episode_codes: dict[str, int] = {}
        self.episode: list[int] = []  # per pair: its episode's code (a new one when none)
        self.continues: list[bool] = []  # per pair: its episode began in an earlier stage
        self.loop: list[tuple[float, ...]] = []  # per pair: what `loop_outcome` reads

    def add(self, n: int, record: Record) -> None:
        rows = self.rows
        rows["segment"].append(self.index.get(str(record.get("segment", "chat")), -1))
        self.episode.append(self._episode(episode_of(record)))
        self.continues.append(continues_of(record))
        rows["created"].append(_seconds(record["created_at"]))
        control = bool(record.get("is_control", False))
        rows["control"].append(control)
        base, cand = record.get("baseline"), record.get("candidate")
        missing = (base is None) + (cand is None)
        dropped = dropped_of(record) or missing == 2
        dropped = dropped or (self.mode is RolloutMode.SHADOW and missing > 0)
        for k, side in enumerate((base, cand)):
            if side is None:
                rows["failed"].append(False)
                rows["cancelled"].append(False)
                for key in ("ttft", "tpot", "e2e", "feedback", "load"):
                    rows[key].append(None)
                continue
            status = STATUSES[side.get("status", "ok")]
            dropped = dropped or status.outcome is Outcome.NOT_ATTRIBUTABLE
            rows["failed"].append(status.outcome is Outcome.ROUTE_FAILURE)
            rows["cancelled"].append(status is GenerationStatus.CANCELLED)
            # None becomes NaN in the float arrays; failed sides are blanked afterwards.
            for key in ("ttft", "tpot", "e2e"):
                rows[key].append(_seconds_or_none(side, f"{key}_s"))
            rows["load"].append(_seconds_or_none(side, "load"))
            thumbs = side.get("feedback")
            rows["feedback"].append(None if thumbs is None else float(thumbs < 0))
            for name, passed in side.get("evals", {}).items():
                # Not evaluable: neither a pass nor a fail, but the evaluator is seen (it
                # has a cell and a kill slot), as in the fold, which sees its result rows.
                self.evals.append((n, k, name, passed if passed is None else bool(passed)))
        rows["dropped"].append(dropped)
        for side in (base, cand):
            fit = exactness_of(side)
            self.tested = self.tested or fit is not None
            self.exact.append(_NO_FIT if fit is None else _fit_row(fit))
        values = parity_values(base, cand)
        self.sampled = self.sampled or values is not None
        self.parity.append(values or [np.nan] * (2 * len(STATISTICS)))
        self.partial.append(partial_logprobs(base, cand))
        drafts = (cand or {}).get("draft_tokens") or 0
        accepted = (cand or {}).get("accepted_tokens") or 0
        rows["acceptance"].append(np.nan if control or not drafts else min(accepted / drafts, 1.0))
        self.loop.append(_NO_LOOP if control else _loop_row(base, cand))

    def _episode(self, name: str | None) -> int:
        if name is None:
            return -1 - len(self.episode)  # its own: a code no named episode takes
        return self.episode_codes.setdefault(name, len(self.episode_codes))

    def columns(self) -> PairColumns:
        rows, n = self.rows, len(self.rows["segment"])
        created = np.asarray(rows["created"], dtype=np.float64)
        names = sorted({e[2] for e in self.evals})
        scores = {name: np.full((n, 2), np.nan) for name in names}
        for i, k, name, passed in self.evals:
            if passed is not None:
                scores[name][i, k] = 0.0 if passed else 1.0
        greedy = scores.pop(self.greedy, np.full((n, 2), np.nan))
        failed = np.asarray(rows["failed"], dtype=bool).reshape(n, 2)

        def latency(key: str) -> FloatArray:
            values = np.asarray(rows[key], dtype=np.float64).reshape(n, 2)
            return np.where(failed, np.nan, values)

        return PairColumns(
            segment=np.asarray(rows["segment"], dtype=np.int64),
            created_s=created - (created[0] if n else 0.0),
            is_control=np.asarray(rows["control"], dtype=bool),
            dropped=np.asarray(rows["dropped"], dtype=bool),
            ttft=latency("ttft"),
            tpot=latency("tpot"),
            e2e=latency("e2e"),
            failed=failed,
            acceptance=np.asarray(rows["acceptance"], dtype=np.float64),
            evals=scores,
            feedback=np.asarray(rows["feedback"], dtype=np.float64).reshape(n, 2),
            mismatch=greedy[:, 1],
            cancelled=np.asarray(rows["cancelled"], dtype=bool).reshape(n, 2),
            load=np.asarray(rows["load"], dtype=np.float64).reshape(n, 2),
            parity=self._parity_columns(n) if self.sampled else None,
            partial_logprobs=np.asarray(self.partial, dtype=bool) if self.sampled else None,
            exactness=self._exact_columns(n) if self.tested else None,
            episode=self._episode_column(),
            continues=np.asarray(self.continues, dtype=bool) if any(self.continues) else None,
            looping=self._loop_columns(n),
        )

    def _loop_columns(self, n: int) -> FloatArray:
        values = np.asarray(self.loop, dtype=np.float64).reshape(n, 5).T
        return np.stack([baseline_collapse(*values), loop_outcome(*values)], axis=-1)

    def _episode_column(self) -> IntArray | None:
        """Each pair's episode code; None when no episode holds two pairs (every pair is then
        its own episode, judged as independent pairs: as the fold judges such a stage)."""
        codes = np.asarray(self.episode, dtype=np.int64)
        named = codes[codes >= 0]
        return codes if len(np.unique(named)) < len(named) else None

    def _exact_columns(self, n: int) -> FloatArray:
        return np.asarray(self.exact, dtype=np.float64).reshape(n, 2, FIT_WIDTH)

    def _parity_columns(self, n: int) -> dict[str, FloatArray]:
        values = np.asarray(self.parity, dtype=np.float64).reshape(n, len(STATISTICS), 2)
        return {stat: values[:, i, :] for i, stat in enumerate(STATISTICS)}


_NO_LOOP = (np.nan,) * 5


def _loop_row(base: Record | None, cand: Record | None) -> tuple[float, ...]:
    """Return what the loop signature reads of a pair: the candidate's emitted, accepted
    and drafted tokens, its answer's distinct-2, the baseline answer's (NaN: unknown)."""
    if base is None or cand is None:
        return _NO_LOOP
    accepted, drafted = cand.get("accepted_tokens") or 0, cand.get("draft_tokens") or 0
    values = (cand.get("output_tokens"), accepted, drafted,
              cand.get("distinct_2"), base.get("distinct_2"))  # fmt: skip
    return tuple(
        float(v) if isinstance(v, int | float) and not isinstance(v, bool) else np.nan
        for v in values
    )


# Per side: tested tokens, cut tokens, the bins, then the most-likely test's three sums.
FIT_WIDTH = 5 + BINS
_NO_FIT = [np.nan] * FIT_WIDTH


def _fit_row(fit: TokenFit) -> list[float]:
    """Return a call's sums in the exactness columns' order (`FIT_WIDTH`)."""
    return [fit.tokens, fit.cut, *fit.bins, fit.off, fit.off_p, fit.off_p2]


def episode_of(record: Record) -> str | None:
    """Return the episode a pair record names (None: the pair is its own episode)."""
    episode = record.get("episode")
    if episode is not None and not isinstance(episode, str):
        raise ValueError(f"episode is not a string or null: {episode!r}")
    return episode


def continues_of(record: Record) -> bool:
    """Return whether a pair's episode began in an earlier stage of the rollout."""
    return _flag(record, "episode_continues")


def dropped_of(record: Record) -> bool:
    """Return whether the pair was dropped (at its deadline): never judged, whatever
    landed later (the fold reads the pair's state, `gate.verdicts.slices`)."""
    return _flag(record, "dropped")


def _flag(record: Record, key: str) -> bool:
    value = record.get(key)
    if value is not None and not isinstance(value, bool):
        raise ValueError(f"{key} is not a boolean or null: {value!r}")
    return bool(value)


def exactness_of(side: Record | None) -> TokenFit | None:
    """Return a side's per-token exactness sums (None: not tested); 400 when malformed."""
    raw = None if side is None else side.get("exactness")
    if raw is None:
        return None
    try:
        return TokenFit.from_dict(raw)
    except (TypeError, ValueError, KeyError) as exc:
        raise InputMalformed(f"a side's exactness is malformed: {exc}") from None


def parity_values(base: Record | None, cand: Record | None) -> list[float] | None:
    """Return a pair's answer statistics per side, NaN where they may not be compared.

    Flat, statistic by statistic, (baseline, candidate) each; None when neither side
    carries sampling settings. The one place pair records meet `gate.parity.eligibility`:
    replay reads it, and the pair's stamp stores its differences for the fold
    (`gate.pairs.parity`).
    """
    sides = [parity_side(s) for s in (base, cand)]
    if all(s is None for s in sides):
        return None
    out = [np.nan] * (2 * len(STATISTICS))
    b, c = sides
    if b is not None and c is not None:
        verdict = eligibility(b[0], c[0])
        usable = [verdict.eligible] * 2
        with_lp = verdict.logprobs
    else:
        usable = [s is not None and side_alone(s[0]) for s in sides]
        with_lp = False
    for k, side in enumerate(sides):
        if side is None or not usable[k]:
            continue
        values = side[1]
        lp_ok = with_lp if b is not None and c is not None else side[0].logprobs_complete
        for i, stat in enumerate(STATISTICS):
            # Mean log-prob where both have it; the text statistics always: whether a
            # speculating side's log-probabilities cover its answer depends on that answer
            # (llama.cpp: one per verify step), so text compared only where they do not
            # would compare a chosen subset of its answers with all of the other side's.
            if stat != "mean_logprob" or lp_ok:
                out[2 * i + k] = _resolved(values.get(stat, np.nan))
    return out


# Below this a statistic is 0: the fold squares differences in Postgres, whose float8
# raises on underflow (a difference of two values this small would square below 1e-308).
TINY = 1e-50


def _resolved(value: float) -> float:
    return 0.0 if abs(value) < TINY else value


def partial_logprobs(base: Record | None, cand: Record | None) -> bool:
    """Return whether a sampled side has log-probabilities that do not cover its answer.

    A route that reports one per verify step (llama.cpp under speculation) does so on the
    answers where drafts were accepted: which answers have them all depends on the answer,
    so a warm-up that saw one leaves mean log-prob untested (`gate.stats.parity_cells`).
    """
    sides = [parity_side(s) for s in (base, cand)]
    return any(s is not None and s[0].has_logprobs and not s[0].logprobs_complete for s in sides)


def parity_side(side: Record | None) -> tuple[Side, dict[str, float]] | None:
    """Return a side's parity settings and statistics, or None without a temperature."""
    if side is None or side.get("temperature") is None:
        return None
    tokens, lp_n, lp_sum = (side.get(k) for k in ("output_tokens", "logprob_tokens", "logprob_sum"))
    made = Side(
        temperature=float(side["temperature"]),
        top_p=float(side["top_p"]) if side.get("top_p") is not None else 1.0,
        max_tokens=side.get("max_tokens"),
        seed=side.get("seed"),
        finish_reason=side.get("finish_reason"),
        completion_tokens=tokens,
        logprob_tokens=lp_n,
    )
    values: dict[str, float] = {}
    if tokens is not None:
        values["length"] = float(tokens)
    if side.get("distinct_2") is not None:
        values["distinct_2"] = float(side["distinct_2"])
    if lp_n and lp_sum is not None:
        values["mean_logprob"] = float(lp_sum) / float(lp_n)
    return made, values


_COLUMNS = "segment created control dropped failed cancelled ttft tpot e2e feedback acceptance load"


def columns(records: Sequence[Record], policy: Policy, mode: RolloutMode) -> PairColumns:
    """Turn pair records (in order) into the columns `to_stats` reads."""
    builder = _Builder(policy, mode)
    for n, record in enumerate(records):
        try:
            builder.add(n, record)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise InputMalformed(
                f"pair {n + 1}: not a pair record ({type(exc).__name__}: {exc})"
            ) from exc
    return builder.columns()


def _order_key(record: Record) -> tuple[int, float, str]:
    evaluated = record.get("evaluated_at")
    if evaluated is None:
        return (1, _seconds(record["created_at"]), "")
    # Ties broken by id, as the database does: a UUID's text sorts as its bytes.
    return (0, _seconds(evaluated), str(record.get("pair_id", "")))


def fold_order(records: list[Record]) -> list[Record]:
    """Return the records in fold order (see the schema above); a stable sort."""
    keys = []
    for n, record in enumerate(records):
        try:
            keys.append(_order_key(record))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise InputMalformed(
                f"pair {n + 1}: not a pair record ({type(exc).__name__}: {exc})"
            ) from exc
    if all(a <= b for a, b in pairwise(keys)):
        return records
    order = sorted(range(len(records)), key=keys.__getitem__)
    return [records[i] for i in order]
