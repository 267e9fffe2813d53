"""`specgate rehearse` with several candidate arms, against small streaming servers over
real HTTP (the CLI in a process of its own): every arm swept against the same baseline,
the best arm per level, a lossy arm never chosen, and the exit code over the arms."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import numpy as np
import orjson
import pytest
from pydantic import ValidationError

from gate.cli import main
from gate.db.models import Rehearsal
from gate.engines.workload import WorkloadItem
from gate.rehearse import arms, report
from gate.rehearse.analysis import ALPHA
from gate.rehearse.runner import Block, Route, Sample
from gate.rehearse.schemas import RehearsalIn
from gate.rehearse.sweep import Level
from gate.rehearse.workload import Workload
from tests import factories
from tests.gate.rehearse.summaries import arms_summary
from tests.gate.rehearse.upstream import Engine, engine_app
from tests.servers import serving

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 6}
FAST = ["--min-requests", "8", "--max-requests", "24", "--precision", "0.2", "--budget", "90s"]
# Enough sampled tokens to prove the lossy arm's TV of 1/2, few enough for two cores.
CHECK = ["--exactness-requests", "6", "--parity-requests", "2", "--logprobs-mode", "processed"]


@pytest.fixture
def workload(tmp_path):
    path = tmp_path / "w.jsonl"
    path.write_text("\n".join(orjson.dumps(BODY).decode() for _ in range(4)) + "\n")
    return path


@contextmanager
def upstreams(**engines: Engine) -> Iterator[dict[str, str]]:
    with ExitStack() as stack:
        yield {name: stack.enter_context(serving(engine_app(e))) for name, e in engines.items()}


def specgate(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the real `specgate rehearse` in a process of its own."""
    command = [sys.executable, "-m", "gate", "rehearse", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)


def candidates(urls: dict[str, str]) -> list[str]:
    return [arg for name, url in urls.items() if name != "base"
            for arg in ("--candidate", f"{name}={url}/v1")]  # fmt: skip


def test_the_fast_arm_leads_a_slower_one_and_a_lossy_one_is_never_chosen(tmp_path, workload):
    engines = {
        "base": Engine(gap_s=0.012),
        "fast": Engine(gap_s=0.003),
        "slow": Engine(gap_s=0.03),
        "lossy": Engine(gap_s=0.002, sampler="lossy"),  # the fastest, but not exact
    }
    with upstreams(**engines) as urls:
        done = specgate(
            "--baseline", f"{urls['base']}/v1", *candidates(urls), "--workload", str(workload),
            "--out", str(tmp_path / "out"), "--max", "2", "--at", "2", "--json", *FAST, *CHECK,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr  # an exact arm pays at 2: the lossy one does not block
    summary = json.loads(done.stdout)
    by_name = {arm["name"]: arm for arm in summary["arms"]}
    assert list(by_name) == ["fast", "slow", "lossy"]
    assert by_name["lossy"]["usable"] is False
    assert by_name["lossy"]["exactness"]["candidate"]["status"] == "deviates"
    assert by_name["fast"]["exactness"]["candidate"]["status"] == "exact"
    assert by_name["fast"]["exactness"]["greedy_parity"]["compared"] == 2
    # Each arm has its own curve against the baseline, at the same levels.
    for arm in by_name.values():
        assert [row["concurrency"] for row in arm["levels"]] == [1, 2]
    assert summary["interval_alpha"] == ALPHA / 3  # the lead arm's: each of 3 at ALPHA / 3
    assert [row["segments"]["all"]["call"] for row in by_name["slow"]["levels"]] == ["loses"] * 2
    assert by_name["slow"]["decision"] == "does not pay" and by_name["fast"]["decision"] == "pays"
    # The fastest exact arm is best at every level, proven ahead of the runner-up.
    for cell in summary["best"]["all"]:
        assert (cell["arm"], cell["runner_up"], cell["call"]) == ("fast", "slow", "leads")
        assert cell["over_runner_up"][0] > 1
    # The top of the document is the lead arm's, as a single-candidate reader reads it.
    assert summary["lead"] == "fast" and summary["routes"]["candidate"] == f"{urls['fast']}/v1"
    assert summary["levels"] == by_name["fast"]["levels"]
    assert summary["decision"] == "pays"
    assert "arm lossy: crossover" in done.stderr and "(not exact: never chosen)" in done.stderr
    assert "best arm, all: at 1 fast" in done.stderr
    assert "## Arms" in (tmp_path / "out" / "rehearsal.md").read_text()
    assert (tmp_path / "out" / "rehearsal.png").stat().st_size > 0


def test_no_exact_arm_exits_3(tmp_path, workload):
    engines = {
        "base": Engine(gap_s=0.01),
        "a": Engine(gap_s=0.004, sampler="lossy"),
        "b": Engine(gap_s=0.004, sampler="lossy"),
    }
    with upstreams(**engines) as urls:
        done = specgate(
            "--baseline", f"{urls['base']}/v1", *candidates(urls), "--workload", str(workload),
            "--out", str(tmp_path / "out"), "--max", "1", "--at", "1", "--json", *FAST, *CHECK,
        )  # fmt: skip
    assert done.returncode == 3, done.stderr
    summary = json.loads(done.stdout)
    assert summary["decision"] == "no arm is exact"
    assert all(not arm["usable"] for arm in summary["arms"])
    assert summary["best"]["all"][0]["arm"] is None


def test_several_arms_are_recorded_with_the_lead_arms_crossover(
    capsys, tmp_path, workload, sqlite_url, sqlite_session
):
    rollout_id = factories.rollout(sqlite_session, name="arms").id
    sqlite_session.commit()
    engines = {"base": Engine(gap_s=0.012), "k2": Engine(gap_s=0.008), "k4": Engine(gap_s=0.003)}
    with upstreams(**engines) as urls, pytest.raises(SystemExit) as exited:
        sys.argv = [
            "specgate", "rehearse", "--baseline", f"{urls['base']}/v1", *candidates(urls),
            "--workload", str(workload), "--out", str(tmp_path / "out"), "--max", "1",
            "--rollout", str(rollout_id), "--database-url", sqlite_url,
            "--exactness-requests", "0", *FAST,
        ]  # fmt: skip
        main()
    assert exited.value.code == 2, capsys.readouterr().err  # no --at: no decision
    sqlite_session.expire_all()
    row = sqlite_session.get(Rehearsal, rollout_id)
    assert row is not None and row.candidate_url == f"{urls['k4']}/v1"
    assert row.summary["lead"] == "k4"
    assert [arm["name"] for arm in row.summary["arms"]] == ["k2", "k4"]
    assert row.summary["crossover"] == row.summary["arms"][1]["crossover"]


@pytest.mark.parametrize(
    ("names", "needle"),
    [
        (["a", "a"], "--candidate names must be unique"),
        (["baseline"], "not 'baseline'"),
        # What a recorded summary cannot hold is refused before the sweep, not after it.
        (["k" * 65, "k2"], "at most 64 characters"),
        ([f"k{i}" for i in range(17)], "at most 16 --candidate arms"),
    ],
)
def test_bad_arm_names_are_one_line_and_exit_4(workload, names, needle):
    given = [arg for name in names for arg in ("--candidate", f"{name}=http://127.0.0.1:9/v1")]
    done = specgate("--baseline", "http://127.0.0.1:9/v1", *given, "--workload", str(workload))
    assert done.returncode == 4 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert needle in line, line


def samples(seconds: list[float]) -> list[Sample]:
    return [Sample("s", ok=True, e2e_s=s, tokens=10, item=str(i)) for i, s in enumerate(seconds)]


def level(**routes: list[float]) -> Level:
    return Level(1, [Block(name, 1, 1.0, samples(s)) for name, s in routes.items()])


def arm(name: str, *, failed: bool = False) -> arms.ArmResult:
    return arms.ArmResult(Route(name, name), {"exactness": {"failed": failed}}, 0)


def test_two_equal_arms_are_tied_and_a_clearly_faster_one_leads() -> None:
    base = [1.0, 1.2, 0.9, 1.1, 1.0, 1.3]
    same = [0.5, 0.6, 0.45, 0.55, 0.5, 0.65]
    found = arms.best(Route("baseline", ""), [arm("a"), arm("b")],
                      [level(baseline=base, a=same, b=same)], ["all"])  # fmt: skip
    (cell,) = found["all"]
    assert cell["call"] == "tied" and cell["over_runner_up"][0] <= 1 <= cell["over_runner_up"][1]
    faster = [s / 2 for s in same]
    found = arms.best(Route("baseline", ""), [arm("a"), arm("b"), arm("c", failed=True)],
                      [level(baseline=base, a=same, b=faster, c=[0.01] * 6)], ["all"])  # fmt: skip
    (cell,) = found["all"]
    assert (cell["arm"], cell["runner_up"], cell["call"]) == ("b", "a", "leads")


def test_a_recorded_summary_must_name_its_lead_among_its_arms() -> None:
    level = {"concurrency": 1, "segments": {"all": {"speedup": None, "interval": None}}}
    arm = {"url": "http://a/v1", "usable": True, "levels": [level],
           "crossover": {"all": {"text": "could not tell"}}}  # fmt: skip
    summary = {
        "routes": {"baseline": "http://b/v1", "candidate": "http://a/v1"},
        "workload": {"source": "w", "requests": 1}, "levels": [level],
        "crossover": {"all": {"text": "could not tell"}},
        "arms": [{**arm, "name": "k2"}, {**arm, "name": "k4"}],
    }  # fmt: skip
    stored = RehearsalIn.model_validate({**summary, "lead": "k4"}).document()
    assert [arm["name"] for arm in stored["arms"]] == ["k2", "k4"] and stored["lead"] == "k4"
    with pytest.raises(ValidationError, match="lead 'k8' must name one of the arms"):
        RehearsalIn.model_validate({**summary, "lead": "k8"})
    with pytest.raises(ValidationError, match="lead None must name"):
        RehearsalIn.model_validate(summary)


def test_an_arm_failing_more_requests_than_the_baseline_is_not_named_best() -> None:
    # `flaky` answers the requests it does answer fastest, but fails 3 of 8 (the baseline
    # none): its speedup leaves the failures out, so as a single candidate it does not win
    # (`level_call`), and it must not lead the arm that wins on every request either.
    base = [1.0, 1.2, 0.9, 1.1, 1.0, 1.3, 0.95, 1.05]
    good = [s / 2 for s in base]
    fast = [s / 4 for s in base]
    flaky = [Sample("s", ok=i >= 3, e2e_s=s, tokens=10, item=str(i)) for i, s in enumerate(fast)]
    lvl = Level(1, [Block("baseline", 1, 1.0, samples(base)), Block("good", 1, 1.0, samples(good)),
                    Block("flaky", 1, 1.0, flaky)])  # fmt: skip
    found = arms.best(Route("baseline", ""), [arm("flaky"), arm("good")], [lvl], ["all"])
    (cell,) = found["all"]
    assert cell["arm"] == "good", cell
    assert cell["call"] == "only"


def test_each_of_k_arms_is_judged_at_alpha_over_k():
    """With K arms, exit 0 says "some arm pays": each arm's speedup interval is at ALPHA / K,
    so that answer is wrong by chance no more often than one candidate's "pays"."""
    rng = np.random.default_rng(0)
    base = 1.0 + rng.normal(0, 0.1, 30)
    cand = base / 1.04 * np.exp(rng.normal(0, 0.06, 30))  # a small, barely proven gain
    found = Workload([WorkloadItem(str(i), "s", "/v1/chat/completions", BODY) for i in range(30)],
                     "test")  # fmt: skip
    routes = (Route("baseline", "http://b/v1"), Route("s", "http://c/v1"))
    lvl = [level(baseline=list(base), s=list(cand))]

    def call(**kw: float) -> str:
        return report.summarise(routes, found, lvl, 60.0, **kw)["levels"][0]["segments"]["all"][
            "call"
        ]

    assert call() == "wins"  # one candidate: proven at 95 %
    assert call(alpha=ALPHA / 3) == "unclear"  # one of three arms: not proven at 98.3 %
    assert (
        report.summarise(routes, found, lvl, 60.0, alpha=ALPHA / 3)["interval_alpha"] == ALPHA / 3
    )


def test_the_report_of_three_arms_says_its_intervals_are_at_98_3_percent(tmp_path):
    # Each of 3 arms is judged at 0.05 / 3: "95 %" on its tables would overstate nothing
    # but misdescribe every interval printed.
    summary = arms_summary()
    text = report.markdown(summary, at=2, decision=summary["decision"])
    assert "98.3 % bootstrap intervals" in text and "| 98.3 % interval |" in text
    assert "95 %" not in text
    assert {arm["interval_alpha"] for arm in summary["arms"]} == {ALPHA / 3}
