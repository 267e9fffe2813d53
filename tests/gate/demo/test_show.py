"""What `specgate demo` prints, rendered at 100 columns: nothing cut, the headline last."""

from __future__ import annotations

import json
from datetime import timedelta

from rich.console import Console
from sqlalchemy import update

from gate.cli.demo import WIDTH, as_document, show
from gate.db.base import utcnow
from gate.db.models import Generation, Pair
from gate.demo.run import DemoResult, demo_policy
from gate.demo.sampled import parity_policy
from gate.demo.summary import ParityCounts, Shift, summarise
from gate.reports import glance, headline
from gate.rollouts.states import Action
from gate.routing import service as routing
from gate.verdicts.service import run_gate
from tests import factories
from tests.gate.reports import seed

# The built-in workload's segments: the longest names the demo's tables must hold.
SEGMENTS = ("chat", "code_edit", "creative", "json_extraction", "proofread", "rag", "text_edit",
            "tool_call")  # fmt: skip


def test_the_demo_output_fits_100_columns_and_ends_with_the_headline(sqlite_session, monkeypatch):
    db = sqlite_session
    monkeypatch.setattr(seed, "SEGMENTS", SEGMENTS)
    rollout = factories.rollout(db, name="demo", policy=demo_policy(list(SEGMENTS)))
    routing.change_state(
        db, rollout_id=rollout.id, action=Action.START, actor="t", reason="t", publisher=None
    )
    seed.traffic(
        db, rollout.id, start=utcnow() - timedelta(minutes=5), hours=0.08, pairs=20,
        baseline=seed.Arm(), candidate=seed.Arm(tpot_s=0.012), seed=5,
    )  # fmt: skip
    db.execute(update(Generation).values(e2e_s=Generation.ttft_s + 40 * Generation.tpot_s))
    db.execute(update(Pair).values(evaluated_at=Pair.created_at))
    verdict = run_gate(db, rollout_id=rollout.id, publisher=None)
    look = glance.of_rollout(db, rollout=rollout, verdict=verdict)
    result = DemoResult(rollout.id, summarise(db, rollout_id=rollout.id), verdict, None, look)

    console = Console(width=WIDTH, record=True, color_system=None)
    show(result, console)
    lines = console.export_text().rstrip("\n").splitlines()

    assert max(len(line) for line in lines) <= WIDTH
    assert not any("…" in line for line in lines), "a cell was cut"
    tail = headline.text_lines(look.headline, width=WIDTH, prefix="verdict: ")
    assert [line.rstrip() for line in lines[-len(tail) :]] == tail
    assert lines[-len(tail)].startswith(f"verdict: {verdict.decision.value.upper()}: ")
    # The tables are all there: every segment, both cohorts' latency, every evaluator.
    cells = {c.strip() for line in lines for c in line.replace("┃", "│").split("│")}
    assert {row.segment for row in result.rows} | {"groundedness", "schema"} <= cells
    # --json: the same, for scripts (strict JSON: no NaN).
    document = json.loads(json.dumps(as_document(result), allow_nan=False))
    assert document["glance"]["headline"]["sentence"] == look.headline.sentence
    assert document["reason_codes"] == list(verdict.reason_codes)
    assert {row["segment"] for row in document["rows"]} == {row.segment for row in result.rows}


def test_a_sampled_run_shows_its_parity_cells_and_eligible_pairs_within_100_columns(
    sqlite_session,
):
    db = sqlite_session
    rollout = factories.rollout(db, name="demo", policy=parity_policy(50))
    routing.change_state(
        db, rollout_id=rollout.id, action=Action.START, actor="t", reason="t", publisher=None
    )
    verdict = run_gate(db, rollout_id=rollout.id, publisher=None)
    verdict.estimates = [
        {"metric": "parity:mean_logprob", "segment": "all", "n": 354, "estimate": 0.251,
         "lower": -0.024, "upper": 0.526, "margin": 0.1, "kill_at": 0.1, "status": "unproven"},
        # Fewer than 20 tested pairs: the stored interval is unbounded (null), not a crash.
        {"metric": "parity:length", "segment": "edit", "n": 12, "estimate": -0.4,
         "lower": None, "upper": None, "margin": 0.1, "kill_at": 0.1, "status": "unproven"},
    ]  # fmt: skip
    counts = ParityCounts(
        467, 405, 405, {"censored": 62}, {"mean_logprob": Shift(405, 0.225, 0.948)}
    )
    look = glance.of_rollout(db, rollout=rollout, verdict=verdict)
    result = DemoResult(rollout.id, [], verdict, None, look, counts)

    console = Console(width=WIDTH, record=True, color_system=None)
    show(result, console)
    text = console.export_text()

    assert max(len(line) for line in text.splitlines()) <= WIDTH
    assert "405 of 467 pairs eligible" in text and "62 censored" in text
    assert "+0.25 │ [-0.02, +0.53]" in text
    assert "-0.40 │  too few pairs" in text
    assert "mean_logprob, all 405 eligible pairs: mean +0.225, sd 0.948, t +4.8" in text
    document = json.loads(json.dumps(as_document(result), allow_nan=False))
    assert document["parity"]["eligible"] == 405
    assert document["parity"]["cells"][0]["metric"] == "parity:mean_logprob"
