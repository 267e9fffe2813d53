"""Rows, bytes and WAL per mirrored pair, per table, through the real write paths (Postgres).

    nice -n 10 .venv/bin/python bench/capacity.py [--exports 20] [--evaluate 400] \
        [--scrapes 400] [--repeats 2] [--rate 1000] [--json bench/results/capacity.json]

On a throwaway database built by the migrations: `--exports` OTLP exports of gateway spans
(170 mirrored pairs each: the pair span and both route calls, `bench/ingest_spans.py`) are
decoded and written by `collectors.store.SpanStore.write` (normalise, COPY) and their pairs
completed as the collector's landing hook does; then up to `--evaluate` complete pairs are
scored and stored by `evaluators.service.evaluate_pair` with the default evaluators, one
transaction a pair as the worker does (the request is greedy, asks for JSON and carries a
tool result, so groundedness, schema and greedy parity all apply); then `--scrapes` scrapes
of a two-process vLLM's /metrics are stored by `collectors.scrape_job.store_scrape`.

Reported per table: rows per pair (per scored pair for `evaluations`, per scrape for
`engine_samples`), bytes per row as stored (`pg_total_relation_size`: heap, TOAST and
indexes, over the row count), the indexes' share, and bytes per row once retention has
scrubbed captured content: as stored, less what the scrub takes out of the mean row tuple
(`pg_column_size`; the freed space is reused by new rows after vacuum). WAL per pair of
each phase is the `pg_current_wal_lsn()` difference: the server's WAL, so writes by other
databases on the same server count too (an upper bound; the model takes the smallest of
`--repeats`). The writer's and the evaluation loop's time per pair are printed too, and
the per-table model at `--rate` pairs/s.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, select, text
from sqlalchemy.orm import Session

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from ingest import database, seed
from ingest_spans import GROUPS_PER_EXPORT, fresh, template

from collectors import scraper
from collectors.otlp import decode_protobuf
from collectors.retention import purge
from collectors.scrape_job import store_scrape
from collectors.store import SpanStore
from evaluators.registry import build_evaluators
from evaluators.service import evaluate_pair
from gate.db.enums import PairState
from gate.db.models import Pair
from gate.pairs.service import complete_ready
from gate.settings import CollectorSettings
from gate.telemetry import attributes as a
from tests.collectors.test_scraper import FIRST, SECOND

# A greedy request asking for JSON with a tool result to ground in: the default groundedness,
# schema and greedy-parity evaluators all apply (the task evaluator needs declared checks).
BODY = json.dumps(
    {
        "temperature": 0,
        "response_format": {"type": "json_object"},
        "messages": [
            {"role": "user", "content": "Refactor this. " * 30},
            {"role": "tool", "content": "def lookup(keys): return {k: k for k in keys} " * 4},
        ],
    }
)
TABLES = ("spans", "generations", "requests", "pairs", "evaluations", "engine_samples")


def wal(engine: Engine) -> int:
    """Return the server's current WAL position in bytes."""
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")).scalar_one())


def sizes(engine: Engine) -> dict[str, dict[str, float]]:
    """Rows, total bytes and index bytes of each table."""
    found = {}
    with engine.connect() as conn:
        for table in TABLES:
            rows, total, index = conn.execute(
                text(
                    f"SELECT count(*), pg_total_relation_size('{table}'), "
                    f"pg_indexes_size('{table}') FROM {table}"
                )
            ).one()
            found[table] = {"rows": rows, "bytes": total, "index_bytes": index}
    return found


def tuple_bytes(engine: Engine) -> dict[str, float]:
    """Mean bytes of a row's tuple (`pg_column_size`) in each table."""
    with engine.connect() as conn:
        return {
            table: float(
                conn.execute(
                    text(f"SELECT coalesce(avg(pg_column_size(t.*)), 0) FROM {table} t")
                ).scalar_one()
            )
            for table in TABLES
        }


def write_spans(engine: Engine, ids: dict[str, int], exports: int) -> float:
    """Write the exports through the collector's store; return the wall seconds."""
    body, offsets = template(ids, False)
    batches = [decode_protobuf(fresh(body, offsets)).rows for _ in range(exports)]
    for rows in batches:
        for row in rows:
            if a.REQUEST_BODY in row.attributes:
                row.attributes[a.REQUEST_BODY] = BODY
    store = SpanStore(engine, pair_deadline_s=300)
    start = time.perf_counter()
    for rows in batches:
        landed = store.write(rows)
        # What the collector's `on_landed` does next (`gate.pairs.runner.PairLifecycle`).
        with Session(engine) as session, session.begin():
            complete_ready(session, pair_ids=landed.pair_ids, enqueue=None)
    return time.perf_counter() - start


def evaluate(engine: Engine, most: int) -> tuple[int, float, float]:
    """Score up to `most` complete pairs as the worker does; return (pairs, wall seconds,
    this process's CPU seconds)."""
    evaluators = build_evaluators(None)
    with Session(engine) as session:
        complete = select(Pair.id).where(Pair.state == PairState.COMPLETE).limit(most)
        pair_ids = session.scalars(complete).all()
    with Session(engine) as session, session.begin():  # imports and lazy tables warm
        evaluate_pair(session, pair_id=pair_ids[0], evaluators=evaluators)
    pair_ids = pair_ids[1:]
    start, cpu = time.perf_counter(), time.process_time()
    for pair_id in pair_ids:
        with Session(engine) as session, session.begin():
            evaluate_pair(session, pair_id=pair_id, evaluators=evaluators)
    return len(pair_ids), time.perf_counter() - start, time.process_time() - cpu


def scrape(engine: Engine, route_id: int, scrapes: int) -> None:
    """Store `scrapes` scrapes, 15 s apart, of a two-process engine's /metrics."""
    texts = (scraper.parse(FIRST), scraper.parse(SECOND))
    at = datetime.now(UTC)
    for index in range(scrapes):
        with Session(engine) as session, session.begin():
            store_scrape(session, route_id, texts[index % 2], at + timedelta(seconds=15 * index))


def run(admin_url: str, exports: int, scrapes: int, most: int) -> dict[str, Any]:
    """Fill one database and measure it."""
    url = database(admin_url, f"specgate_capacity_{os.getpid()}", create=True)
    try:
        ids = seed(url)
        engine = create_engine(url)
        start = wal(engine)
        spans_s = write_spans(engine, ids, exports)
        after_spans = wal(engine)
        pairs, evaluate_s, evaluate_cpu = evaluate(engine, most)
        after_evaluations = wal(engine)
        scrape(engine, ids["baseline"], scrapes)
        after_scrapes = wal(engine)
        stored, before = sizes(engine), tuple_bytes(engine)
        # Retention's content scrub: the space it frees in each row is reused by new rows.
        purge(engine, CollectorSettings(), now=datetime.now(UTC) + timedelta(days=8))
        freed = {t: before[t] - b for t, b in tuple_bytes(engine).items()}
        engine.dispose()
    finally:
        database(admin_url, f"specgate_capacity_{os.getpid()}", create=False)
    sent = exports * GROUPS_PER_EXPORT
    return {
        "pairs_sent": sent,
        "pairs_evaluated": pairs,
        "scrapes": scrapes,
        "writer_wall_us_per_pair": spans_s / sent * 1e6,
        "evaluate_wall_us_per_pair": evaluate_s / max(pairs, 1) * 1e6,
        "evaluate_cpu_us_per_pair": evaluate_cpu / max(pairs, 1) * 1e6,
        "wal_bytes_per_pair_spans": (after_spans - start) / sent,
        "wal_bytes_per_pair_evaluations": (after_evaluations - after_spans) / max(pairs, 1),
        "wal_bytes_per_sample": (after_scrapes - after_evaluations)
        / max(stored["engine_samples"]["rows"], 1),
        "stored": stored,
        "freed_by_scrub_per_row": freed,
    }


def table(result: dict[str, Any]) -> list[str]:
    """Markdown rows: per table rows per pair, bytes per row stored and after the scrub."""
    sent, scrapes = result["pairs_sent"], result["scrapes"]
    scored = max(result["pairs_evaluated"], 1)
    lines = [
        "| table | rows per pair | bytes/row stored | of it indexes | bytes/row once scrubbed |",
        "|---|---|---|---|---|",
    ]
    for name in TABLES:
        stored, freed = result["stored"][name], result["freed_by_scrub_per_row"][name]
        rows = max(stored["rows"], 1)
        per = f"{stored['rows'] / (scored if name == 'evaluations' else sent):.2f}"
        if name == "engine_samples":
            per = f"{stored['rows'] / scrapes:.1f} per scrape"
        lines.append(
            f"| {name} | {per} | {stored['bytes'] / rows:.0f} | "
            f"{stored['index_bytes'] / rows:.0f} | {stored['bytes'] / rows - freed:.0f} |"
        )
    return lines


def model(results: list[dict[str, Any]], rate: float) -> list[str]:
    """Markdown rows per table at `rate` pairs/s from the smallest figures of the repeats:
    rows/s, GB a day as stored, GB on disk at the default retentions (content scrubbed
    after 7 days, spans dropped after 14, the rest kept: they grow by the scrubbed size)."""
    day, gb = 86_400, 1e9
    lines = [
        f"| table | rows/s at {rate:,.0f} pairs/s | GB/day stored | GB on disk at day 14 "
        "| GB/day after day 14 |",
        "|---|---|---|---|---|",
    ]
    for name in TABLES[:-1]:
        fresh = min(r["stored"][name]["bytes"] / max(r["stored"][name]["rows"], 1) for r in results)
        packed = fresh - min(r["freed_by_scrub_per_row"][name] for r in results)
        per_pair = results[0]["stored"][name]["rows"] / (
            results[0]["pairs_evaluated"] if name == "evaluations" else results[0]["pairs_sent"]
        )
        rows = per_pair * rate
        daily = rows * fresh * day / gb
        after = 0.0 if name == "spans" else rows * packed * day / gb
        held = 14 * daily if name == "spans" else 7 * daily + 7 * rows * packed * day / gb
        lines.append(f"| {name} | {rows:,.0f} | {daily:,.1f} | {held:,.0f} | {after:,.1f} |")
    wal = min(r["wal_bytes_per_pair_spans"] + r["wal_bytes_per_pair_evaluations"] for r in results)
    lines.append(f"WAL: {wal:,.0f} B/pair = {wal * rate / 1e6:,.1f} MB/s = "
                 f"{wal * rate * day / gb:,.0f} GB/day")  # fmt: skip
    samples = results[0]["stored"]["engine_samples"]["rows"] / results[0]["scrapes"]
    sample_bytes = min(
        r["stored"]["engine_samples"]["bytes"] / r["stored"]["engine_samples"]["rows"]
        for r in results
    )
    per_route = samples * day / 15 * sample_bytes / gb
    lines.append(
        f"engine_samples: {samples:.1f} rows a scrape of a two-process engine, every 15 s: "
        f"{per_route:.2f} GB/day a route, {14 * per_route:.1f} GB at 14 days"
    )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exports", type=int, default=20, help="exports of 170 pairs each")
    parser.add_argument("--scrapes", type=int, default=400)
    parser.add_argument("--evaluate", type=int, default=600, help="pairs scored, at most")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--rate", type=float, default=1000.0, help="pairs/s for the model")
    parser.add_argument("--admin-url", default="postgresql+psycopg://postgres@127.0.0.1/postgres")
    args = parser.parse_args()
    results = []
    for _ in range(args.repeats):
        result = run(args.admin_url, args.exports, args.scrapes, args.evaluate)
        results.append(result)
        print("\n".join(table(result)))
        keys = [k for k in result if "_per_" in k and not isinstance(result[k], dict)]
        print(", ".join(f"{k} {result[k]:.0f}" for k in keys), flush=True)
    print("\n".join(model(results, args.rate)))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
