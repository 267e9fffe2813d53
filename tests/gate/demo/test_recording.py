"""The demo ends on a decision: its shipped recording of real pairs, replayed through the gate."""

from __future__ import annotations

import json
import re

from rich.console import Console

from gate.cli.demo import WIDTH, as_document, show
from gate.demo.recording import replay_recording
from gate.demo.run import DemoResult, demo_policy
from gate.reports import glance, headline
from gate.rollouts.states import Action
from gate.routing import service as routing
from gate.verdicts.service import run_gate
from tests import factories


def test_the_shipped_recording_reaches_a_decision_before_its_end():
    recording = replay_recording()

    assert recording.decisive and recording.decision in ("kill", "promote")
    assert 0 < recording.pairs <= recording.total_pairs
    assert recording.reasons and recording.reason_codes[0].startswith(recording.decision)
    line = recording.line()
    assert line.startswith("Replayed recording (real pairs from these engines, recorded 20")
    assert re.search(r"\): (KILL|PROMOTE) at pair \d+ of \d+: ", line), line


def test_the_demo_prints_the_replayed_decision_after_the_live_headline(sqlite_session):
    db = sqlite_session
    rollout = factories.rollout(db, name="demo", policy=demo_policy(["chat"]))
    routing.change_state(
        db, rollout_id=rollout.id, action=Action.START, actor="t", reason="t", publisher=None
    )
    verdict = run_gate(db, rollout_id=rollout.id, publisher=None)
    look = glance.of_rollout(db, rollout=rollout, verdict=verdict)
    result = DemoResult(rollout.id, [], verdict, None, look)
    recording = replay_recording()

    console = Console(width=WIDTH, record=True, color_system=None)
    show(result, console, recording)
    text = console.export_text()

    assert max(len(line) for line in text.splitlines()) <= WIDTH
    live, closing = text.split("Replayed recording")
    tail = headline.text_lines(look.headline, width=WIDTH, prefix="verdict: ")
    assert [line.rstrip() for line in live.rstrip("\n").splitlines()[-len(tail) :]] == tail
    assert " ".join(f"Replayed recording{closing}".split()) == " ".join(recording.line().split())
    document = json.loads(json.dumps(as_document(result, recording), allow_nan=False))
    assert document["recording"]["pairs"] == recording.pairs
