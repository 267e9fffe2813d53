"""Time gate verdicts over N stored pairs in Postgres (the incremental fold path).

    python bench/gate_sql.py --pairs 1000000 --new 1000 --repeat 5 [--episode-len 10] [--arms 3]
        [--rated 0.05] [--partitioned]

Creates a throwaway database on the local server, builds it with the migrations, loads N
complete, evaluated shadow pairs (two generations and two evaluations each, five
segments, `evaluated_at` up to 30 s after creation; every pair sampled at temperature 0.8
and eligible for sampled-output parity, 80 % with log-probabilities, each pair's parity
differences computed as its stamp does, `gate.pairs.parity`; each route's load at the
pair's start stamped as from the engine gauge, the candidate's spread over the default
load bands) with COPY, and runs ANALYZE. The rollout's policy is the default (parity and
load bands on) with one stage, `--policy` fields over it. Then it
times `gate.verdicts.service.compute` (what the periodic gate and `gate check` run) plus
the commit of the fold state, each in its own transaction:

1. the initial fold: no state yet, all N pairs are folded;
2. verdicts with no new pairs since the last run (`--repeat` times);
3. verdicts after `--new` new evaluated pairs landed since the last run (`--repeat`
   times, a fresh batch each; loading a batch is not timed).

With `--arms K` (issue 40) the rollout has K candidate arms: pair j goes to arm j % K,
except every `CONTROL_EVERY`-th pair, a control pair (the baseline against itself, no arm),
which counts in every arm's stream; the verdict then folds each arm (`gate_folds` per arm)
and chooses the best arm.

The database is dropped at the end.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import psycopg
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from gate.db import migrate
from gate.db.engine import make_engine, session_factory
from gate.db.enums import RolloutState, RouteRole
from gate.db.models import Rollout, RolloutArm
from gate.pairs.parity import differences
from gate.rollouts import service as routes
from gate.rollouts.schemas import RouteIn
from gate.stats.policy import DEFAULT_SEGMENTS, load_policy
from gate.stats.verdict import VerdictResult
from gate.verdicts.service import compute
from tests import factories

SEGMENTS = DEFAULT_SEGMENTS
N_SEGMENTS = len(SEGMENTS)


def load(
    dsn: str,
    rollout_id: int,
    n: int,
    *,
    first: int,
    start: datetime,
    seed: int,
    stamped: datetime | None = None,
    episode_len: int = 0,
    arms: int = 0,
    rated: float = 0.0,
) -> None:
    """COPY pairs `first` .. `first + n - 1`, created 150 ms apart from `start`.

    Each is evaluated up to 30 s after creation, or at `stamped` when given. A `rated`
    share of the pairs gets a thumbs rating on each side (10 % down), made when evaluated.
    """
    rng = np.random.default_rng(seed)
    shared = np.exp(rng.normal(0, 0.5, n))
    lag_ms = rng.integers(0, 30_000, n)
    passed = rng.random(n) < 0.85
    sides = [sampled_sides(rng, with_logprobs=bool(rng.random() < 0.8)) for _ in range(n)]
    ids = [uuid.uuid4() for _ in range(n)]
    # Running requests at each pair's start: baseline about 40, candidate about 12.
    loads = np.round(np.exp(rng.normal([np.log(40.0), np.log(12.0)], 0.6, (n, 2))))
    created = [start + timedelta(milliseconds=150 * i) for i in range(n)]
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        with cur.copy(
            "COPY pairs (id, rollout_id, stage, state, is_control, segment, "
            "created_at, deadline, completed_at, evaluated_at, parity, baseline_load, "
            "candidate_load, baseline_load_source, candidate_load_source, episode, arm) FROM STDIN"
        ) as copy:
            for i, pair_id in enumerate(ids):
                at = created[i]
                evaluated = stamped or at + timedelta(milliseconds=int(lag_ms[i]))
                segment = SEGMENTS[(first + i) % N_SEGMENTS]
                d = json.dumps(differences(*sides[i]))
                copy.write_row(
                    (pair_id, rollout_id, 0, "complete", is_control(first + i, arms), segment,
                     at, at + timedelta(minutes=5), at, evaluated, d, float(loads[i, 0]),
                     float(loads[i, 1]), "engine", "engine", episode(first + i, episode_len),
                     arm_of(first + i, arms))
                )  # fmt: skip
        with cur.copy(
            "COPY generations (id, rollout_id, pair_id, cohort, segment, status, "
            "ttft_s, tpot_s, e2e_s, spec_draft_tokens, spec_accepted_tokens, stream, "
            "started_at, " + ", ".join(PARITY) + ") FROM STDIN"
        ) as copy:
            for i, pair_id in enumerate(ids):
                control = is_control(first + i, arms)
                for side, cohort in enumerate(("baseline", "control" if control else "candidate")):
                    tpot = 0.02 * shared[i] * (0.8 if side and not control else 1.0)
                    copy.write_row(
                        (2 * (first + i) + side + 1, rollout_id, pair_id, cohort,
                         SEGMENTS[(first + i) % N_SEGMENTS], "ok", 0.1 * shared[i], tpot,
                         0.1 + 64 * tpot, 40 * side, 30 * side, True, created[i],
                         *(sides[i][side][k] for k in PARITY))
                    )  # fmt: skip
        with cur.copy(
            "COPY evaluations (generation_id, generation_started_at, evaluator, version, "
            "passed, details, created_at) FROM STDIN"
        ) as copy:
            for i in range(n):
                for side in (0, 1):
                    gid = 2 * (first + i) + side + 1
                    # Its generation's `started_at` (migration 0032; the partition key).
                    at = created[i]
                    copy.write_row((gid, at, "task", "1", bool(passed[i]), "{}", at))
        if rated:
            with cur.copy(
                "COPY feedback (generation_id, thumbs, escalated, created_at) FROM STDIN"
            ) as copy:
                for i in np.flatnonzero(rng.random(n) < rated):
                    at = stamped or created[i] + timedelta(milliseconds=int(lag_ms[i]))
                    for side in (0, 1):
                        down = rng.random() < 0.1
                        copy.write_row((2 * (first + i) + side + 1, -1 if down else 1, False, at))
        conn.execute("SELECT setval('generations_id_seq', %s)", (2 * (first + n) + 1,))
        conn.commit()


# With arms, one pair in this many is a control pair (no arm, in every arm's stream).
CONTROL_EVERY = 20


def is_control(j: int, arms: int) -> bool:
    """Return whether pair j is a control pair (only with arms)."""
    return arms > 0 and j % CONTROL_EVERY == CONTROL_EVERY - 1


def arm_of(j: int, arms: int) -> str | None:
    """Return pair j's arm (None: one candidate, or a control pair)."""
    return None if arms <= 0 or is_control(j, arms) else f"arm{j % arms}"


# Conversations in flight at once (`--episode-len`): pair j is in conversation j % this of
# its block, so conversations interleave and the newest pairs continue folded ones.
CONCURRENT = 50


def episode(j: int, length: int) -> str | None:
    """Return pair j's episode: conversations of `length` pairs (0: none, every pair alone)."""
    if length <= 0:
        return None
    block = j // (length * CONCURRENT)
    return f"ep{block * CONCURRENT + j % CONCURRENT}"


# The generation columns sampled-output parity reads (as `gate.pairs.export` writes them).
PARITY = ("temperature", "top_p", "max_tokens", "seed", "finish_reason", "output_tokens",
          "logprob_tokens", "logprob_sum")  # fmt: skip


def sampled_sides(rng: np.random.Generator, *, with_logprobs: bool) -> tuple[dict, dict]:
    """Return a pair's two sampled sides: same settings, natural ends, independent draws."""
    out = []
    for _ in range(2):
        tokens = int(rng.integers(20, 200))
        out.append({
            "temperature": 0.8, "top_p": 1.0, "max_tokens": 256, "seed": None,
            "finish_reason": "stop", "output_tokens": tokens,
            "logprob_tokens": tokens if with_logprobs else None,
            "logprob_sum": float(rng.normal(-1.0, 0.2)) * tokens if with_logprobs else None,
            "distinct_2": None,  # no text kept
        })  # fmt: skip
    return out[0], out[1]


def timed_verdict(sessions: sessionmaker[Session], rollout_id: int) -> tuple[float, VerdictResult]:
    """Return the seconds one verdict took (compute and commit), and the verdict."""
    with sessions() as db:
        rollout = db.get(Rollout, rollout_id)
        assert rollout is not None
        policy = load_policy(rollout.policy)
        started = time.perf_counter()
        verdict = compute(db, rollout=rollout, policy=policy)
        db.commit()
        return time.perf_counter() - started, verdict


class SqlClock:
    """Seconds an engine's statements took (sent to their result), to tell the verdict's
    time in Postgres from its time in Python."""

    def __init__(self, engine: Engine) -> None:
        self.seconds = 0.0
        self.runs: list[float] = []
        event.listen(engine, "before_cursor_execute", self._start)
        event.listen(engine, "after_cursor_execute", self._stop)

    def _start(self, conn: Any, *_args: Any) -> None:
        conn.info["sql_started"] = time.perf_counter()

    def _stop(self, conn: Any, *_args: Any) -> None:
        self.seconds += time.perf_counter() - conn.info.pop("sql_started", time.perf_counter())

    def timed(
        self, sessions: sessionmaker[Session], rollout_id: int
    ) -> tuple[float, VerdictResult]:
        """Time one verdict, noting its statements' share."""
        self.seconds = 0.0
        took = timed_verdict(sessions, rollout_id)
        self.runs.append(self.seconds)
        return took


def report(
    label: str, runs: list[tuple[float, VerdictResult]], sql: list[float] | None = None
) -> None:
    took = [t for t, _ in runs]
    last = runs[-1][1]
    in_sql = f"; in SQL median {statistics.median(sql[-len(runs) :]):.3f} s" if sql else ""
    print(
        f"{label}: median {statistics.median(took):.3f} s, max {max(took):.3f} s "
        f"({', '.join(f'{t:.3f}' for t in took)}); {last.decision.value} on {last.n_pairs:,} pairs"
        f"{in_sql}"
    )


def bench(url: str, args: argparse.Namespace) -> None:
    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    engine = make_engine(url)
    sessions = session_factory(engine)
    clock = SqlClock(engine)
    with sessions() as db, db.begin():
        policy = {"stages": [100], **json.loads(args.policy)}
        rollout = factories.rollout(db, name="bench", policy=policy)
        rollout.state = RolloutState.RUNNING
        rollout_id = rollout.id
        for k in range(args.arms):
            spec = RouteIn(name=f"bench-arm{k}", base_url="http://127.0.0.1:9/v1", model="m",
                           role=RouteRole.CANDIDATE)  # fmt: skip
            route = routes.create_route(db, spec=spec, actor="bench")
            rollout.arms.append(RolloutArm(name=f"arm{k}", route_id=route.id))
    start = datetime.now(UTC) - timedelta(days=3)
    if args.partitioned:
        partition_telemetry(url, start)
    started = time.perf_counter()
    load(dsn, rollout_id, args.pairs, first=0, start=start, seed=0, episode_len=args.episode_len,
         arms=args.arms, rated=args.rated)  # fmt: skip
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ANALYZE")
    print(f"loaded {args.pairs:,} pairs in {time.perf_counter() - started:.1f} s")
    report("initial fold + verdict", [clock.timed(sessions, rollout_id)], clock.runs)
    idle = [clock.timed(sessions, rollout_id) for _ in range(args.repeat)]
    report("verdict, 0 new pairs", idle, clock.runs)
    runs = []
    for k in range(args.repeat):
        first = args.pairs + k * args.new
        # Created minutes ago, evaluated just now: after the last fold's horizon.
        now = datetime.now(UTC)
        batch_start = now - timedelta(minutes=5)
        load(
            dsn, rollout_id, args.new, first=first, start=batch_start, seed=k + 1, stamped=now,
            episode_len=args.episode_len, arms=args.arms, rated=args.rated,
        )  # fmt: skip
        runs.append(clock.timed(sessions, rollout_id))
    report(f"verdict, {args.new:,} new pairs", runs, clock.runs)
    print(f"episodes: {runs[-1][1].n_episodes}")
    if args.arms:
        print(f"arms: {runs[-1][1].summary}")


# What `--partitioned` converts (`specgate db partition pairs generations requests
# evaluations`), a day a partition.
PARTITIONED = ("pairs", "generations", "requests", "evaluations")


def partition_telemetry(url: str, start: datetime) -> None:
    """Partition the (empty) telemetry tables the gate reads a day a partition, with the
    partitions from `start`'s day on made too (as a conversion makes for stored rows)."""
    from gate.db import online_partition, partitions

    engine = make_engine(url)
    first = partitions.floor(start, 86_400)
    days = [first + timedelta(days=d) for d in range(5)]
    for table in PARTITIONED:
        online_partition.convert(engine, table, period=86_400, echo=lambda _line: None)
        with engine.begin() as conn:
            have = {s for _, s, _ in partitions.partitions(conn, table)}
            column = partitions.LAYOUTS[table].column
            for day in (d for d in days if d not in have):
                partitions.create_partition(conn, table, column, day, 86_400)
    engine.dispose()
    print(f"partitioned {', '.join(PARTITIONED)} a day a partition")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=1_000_000)
    parser.add_argument("--new", type=int, default=1_000)
    parser.add_argument("--repeat", type=int, default=5)
    # E.g. '{"guardrails": {"load_bands": {"enabled": false}}}' (the bands' cost alone).
    parser.add_argument("--policy", default="{}", help="policy fields (JSON) over the default")
    parser.add_argument(
        "--episode-len", type=int, default=0,
        help="pairs per conversation, 50 interleaved at a time (0: no episodes; issue 39)",
    )  # fmt: skip
    parser.add_argument(
        "--arms", type=int, default=0,
        help="candidate arms; pairs split evenly, 1 in 20 a control pair (0: one candidate)",
    )  # fmt: skip
    parser.add_argument(
        "--rated", type=float, default=0.0,
        help="share of pairs with a thumbs rating on each side (the live feedback read; issue 39)",
    )  # fmt: skip
    parser.add_argument(
        "--partitioned", action="store_true",
        help="partition pairs, generations, requests and evaluations a day a partition (issue 43)",
    )  # fmt: skip
    parser.add_argument("--server", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    on_scratch_database(args.server, lambda url: bench(url, args))


def on_scratch_database(server: str, run: Callable[[str], None]) -> None:
    """Run `run(url)` on a new, migrated database on `server`, dropped afterwards."""
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    name = f"specgate_bench_{uuid.uuid4().hex[:8]}"
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(server).set(database=name).render_as_string(hide_password=False)
    try:
        migrate.upgrade(url)
        run(url)
    finally:
        with admin.connect() as c:
            c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


if __name__ == "__main__":
    main()
