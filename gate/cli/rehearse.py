"""`specgate rehearse`: does speculation pay at our concurrency, before any live traffic?"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

from gate.cli.common import (
    DatabaseOption,
    cli_actor,
    cli_transaction,
    read_input,
    settings_with,
)
from gate.cli.exits import NOT_EXACT
from gate.cli.gatecheck import parse_duration
from gate.db.base import utcnow
from gate.engines.workload import WorkloadItem
from gate.errors import ConfigError, GateError
from gate.exactness_position import MODES
from gate.rehearse import arms, exactness, report, service
from gate.rehearse.analysis import ALL, ALPHA, RehearsalAnswer, decide
from gate.rehearse.runner import Route
from gate.rehearse.schemas import ARM_NAME_MAX, MAX_ARMS, RehearsalIn
from gate.rehearse.sweep import Level, Plan, check_routes, levels_up_to, rehearse
from gate.rehearse.workload import Workload, load
from gate.rollouts import service as rollouts
from gate.settings import Settings
from gate.stats.policy import Policy, load_policy

_WORDS = {
    RehearsalAnswer.PAYS: "pays",
    RehearsalAnswer.DOES_NOT_PAY: "does not pay",
    RehearsalAnswer.CANNOT_TELL: "could not tell",
}


def rehearse_command(
    baseline: Annotated[str, typer.Option(help="Baseline OpenAI base URL (…/v1).")],
    candidate: Annotated[
        list[str],
        typer.Option(
            help="Speculative candidate's OpenAI base URL. Repeat it (up to 16), as URL or "
            "NAME=URL (NAME up to 64 characters), to rehearse several arms against the same "
            "baseline."
        ),
    ],
    workload: Annotated[
        Path | None,
        typer.Option(
            help="JSONL of OpenAI chat/completion bodies or `pairs export --with-requests` "
            "records (default: the built-in workload)."
        ),
    ] = None,
    segment: Annotated[
        list[str] | None,
        typer.Option(
            help="Replay only these prompt classes: CLASS, or NAME=CLASS,CLASS to report "
            "several under one name (repeat the option)."
        ),
    ] = None,
    model: Annotated[str, typer.Option(help="Send this model name (default: the body's).")] = "",
    max_tokens: Annotated[int, typer.Option(help="Cap every request's max_tokens (0: keep).")] = 0,
    max_concurrency: Annotated[
        int, typer.Option("--max", help="Sweep 1, 2, 4, … up to this many concurrent requests.")
    ] = 8,
    at: Annotated[
        int, typer.Option(help="Production concurrency the exit code answers for (0: none).")
    ] = 0,
    budget: Annotated[
        str, typer.Option(help="Time budget for the whole sweep (10m, 90s).")
    ] = "10m",
    min_requests: Annotated[
        int, typer.Option(help="Requests per route and level before the precision rule.")
    ] = 16,
    max_requests: Annotated[int, typer.Option(help="Requests per route and level, at most.")] = 400,
    precision: Annotated[
        float, typer.Option(help="Stop a level once its interval is this narrow (relative).")
    ] = 0.10,
    timeout: Annotated[float, typer.Option(help="Seconds one request may take.")] = 120.0,
    out: Annotated[Path, typer.Option(help="Folder for rehearsal.json, .md and .png.")] = Path(
        "rehearsal"
    ),
    rollout: Annotated[
        int, typer.Option(help="Record the summary as this rollout's rehearsal (0: do not).")
    ] = 0,
    exactness_requests: Annotated[
        int,
        typer.Option(
            help="Sampled requests per route for the per-token exactness test, before the "
            "sweep (0: skip it)."
        ),
    ] = 8,
    parity_requests: Annotated[
        int, typer.Option(help="Greedy requests per route compared token for token (0: skip).")
    ] = 4,
    exactness_max_tokens: Annotated[
        int, typer.Option(help="Cap each exactness and parity request's max_tokens.")
    ] = 64,
    exactness_temperature: Annotated[
        float, typer.Option(help="Temperature of the sampled exactness requests.")
    ] = 0.8,
    logprobs_mode: Annotated[
        str,
        typer.Option(
            help="What the routes' logprobs describe: 'raw' (vLLM's default and the local "
            "engines': the model at temperature 1) or 'processed' (the sampling distribution)."
        ),
    ] = "raw",
    policy: Annotated[
        Path | None,
        typer.Option(
            help="Gate policy YAML: the exactness test's margin_tv, top_logprobs and lossy, "
            "and alpha_kill as its level (default: the default policy's)."
        ),
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option("--json", help="Print the summary (rehearsal.json) on stdout, and only it."),
    ] = False,
    database_url: DatabaseOption = None,
) -> None:
    """Replay a workload against a baseline and one or more candidates at rising
    concurrency; find where speculation stops paying.

    Routes run in alternating blocks, never at once; each block holds the level's
    concurrency while it measures, and the summary gives the concurrency each route was
    actually held at. First, unless --exactness-requests is 0, sampled requests test the
    candidate's tokens one by one against the target's distribution (the baseline runs the
    same test as the control), and greedy requests compare both routes token for token.
    Exit 0 pays at --at, 1 does not, 2 could not tell (or --at above the sweep, or no --at
    given), 3 the candidate is not exact (a per-token deviation beyond the policy's
    margin_tv proven, the baseline passing), 4 error (one line on stderr).

    With several --candidate arms, each is swept against the same baseline on the same
    workload and levels, in turn, and tested for exactness on its own; the report names
    the best arm per level and segment (proven faster than the runner-up, or tied). An
    arm that is not exact is reported and never chosen. Exit 0 some exact arm pays at
    --at, 1 every exact arm does not pay, 2 could not tell, 3 no arm is exact, 4 error."""
    # One progress line per round on stderr, not one log line per request.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    say = typer.echo if not as_json else _say
    try:
        recording = _recording(rollout, database_url)
        check = _exactness(
            _policy(policy), exactness_requests, parity_requests, exactness_max_tokens,
            exactness_temperature, logprobs_mode, timeout,
        )  # fmt: skip
        code, summary = _rehearse(
            (Route("baseline", _url("--baseline", baseline), model or None),
             *_arms(candidate, model or None)),
            workload, segment or [], max_tokens, max_concurrency, at,
            Plan(levels=[], budget_s=parse_duration(budget), min_requests=min_requests,
                 max_requests=max_requests, precision=precision, timeout_s=timeout),
            out, say, check,
        )  # fmt: skip
        if recording is not None:
            say(_record(recording, rollout, summary))
        if as_json:
            typer.echo(json.dumps(summary, indent=2))
    except GateError as exc:
        _error(exc.message)
    except Exception as exc:  # the pipeline must see 4, never a traceback's 1
        _error(f"{type(exc).__name__}: {exc}")
    raise typer.Exit(code)


def _rehearse(
    routes: tuple[Route, ...],
    path: Path | None,
    segments: list[str],
    max_tokens: int,
    top: int,
    at: int,
    plan: Plan,
    out: Path,
    say: Callable[[str], None],
    check: exactness.Check | None = None,
) -> tuple[int, dict[str, Any]]:
    _check(top, at, plan)
    found = load(path, segments=_segments(segments), max_tokens=max_tokens or None)
    asyncio.run(check_routes(routes, plan.timeout_s))  # an unreachable route: one line, no plan
    # The exactness phase has its own token cap (--exactness-max-tokens), not --max-tokens.
    items = load(path, segments=_segments(segments)).items if check is not None else []
    baseline, candidates = routes[0], routes[1:]
    exact = {arm.name: _exact((baseline, arm), items, check, say) for arm in candidates}
    levels = levels_up_to(top)
    plan = Plan(**{**vars(plan), "levels": levels})
    skipped = f", {found.cut} skipped with a cut prompt" if found.cut else ""
    _say(f"{len(found.items)} requests from {found.source}{skipped}; levels {levels}, "
         f"budget {plan.budget_s:.0f} s")  # fmt: skip
    started = utcnow()
    done = asyncio.run(rehearse(routes, found.items, plan, _say))
    # Each of K arms' intervals at ALPHA / K: "some arm pays" is then wrong by chance no
    # more often than one candidate's "pays" (Bonferroni).
    alpha = ALPHA / len(candidates)
    results = [
        _arm((baseline, arm), found, done, plan, at, started.isoformat(), exact[arm.name], check,
             alpha)
        for arm in candidates
    ]  # fmt: skip
    if len(results) == 1:
        code, summary = results[0].code, results[0].summary
    else:
        summary = arms.combine(baseline, results, done, arms.lead_level(levels, at))
        answer = arms.answer(results)
        code = NOT_EXACT if answer is None else int(answer)
    out.mkdir(parents=True, exist_ok=True)
    (out / "rehearsal.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "rehearsal.md").write_text(report.markdown(summary, at=at, decision=summary["decision"]))
    report.plot(summary, out / "rehearsal.png")
    for line in _lines(summary, at):
        say(line)
    say(f"written: {out}/rehearsal.json, rehearsal.md, rehearsal.png")
    return code, summary


def _arm(
    routes: tuple[Route, Route], found: Workload, done: list[Level], plan: Plan, at: int,
    run_at: str, exact: exactness.Result | None, check: exactness.Check | None, alpha: float,
) -> arms.ArmResult:  # fmt: skip
    """Return one arm's summary against the baseline, as a single-candidate run writes it
    (its speedup intervals at `alpha`)."""
    summary = {
        "run_at": run_at,
        **report.summarise(routes, found, done, plan.budget_s, alpha=alpha),
    }
    decision = decide(plan.levels, report.calls(summary), at) if at else RehearsalAnswer.CANNOT_TELL
    summary["at"] = at or None
    summary["decision"] = _WORDS[decision] if at else "no --at given"
    if exact is not None and check is not None:
        summary["exactness"] = exact.summary(check)
    code = NOT_EXACT if exact is not None and exact.failed else int(decision)
    return arms.ArmResult(routes[1], summary, code)


def _lines(summary: dict[str, Any], at: int) -> list[str]:
    """Return the result in words: the crossover, the decision and the exactness."""
    if "arms" not in summary:
        return [
            f"crossover: {summary['crossover'][ALL]['text']}",
            f"at concurrency {at}: {summary['decision']}" if at else summary["decision"],
            *report.exactness_lines(summary.get("exactness")),
        ]
    out = arms.lines(summary)
    for arm in summary["arms"]:  # "exit 3" is the whole run's, said by the arm's state
        out += [f"arm {arm['name']}: {line}" for line in report.exactness_lines(arm["exactness"])
                if not line.endswith("exit 3")]  # fmt: skip
    return [*out, f"at concurrency {at}: {summary['decision']}" if at else summary["decision"]]


def _exact(
    routes: tuple[Route, Route],
    items: list[WorkloadItem],
    check: exactness.Check | None,
    say: Callable[[str], None],
) -> exactness.Result | None:
    """Run the exactness phase on the workload's plain-text requests, unless skipped."""
    if check is None:
        return None
    usable = exactness.usable(items)
    if not usable:
        _say("exactness: skipped, the workload has no request without tools or a schema")
        return None
    return asyncio.run(exactness.run(routes, usable, check, say=_say))


def _policy(path: Path | None) -> Policy:
    return Policy() if path is None else load_policy(read_input(path, "policy"))


def _exactness(
    policy: Policy, requests: int, parity: int, max_tokens: int, temperature: float,
    mode: str, timeout_s: float,
) -> exactness.Check | None:  # fmt: skip
    """Return how the exactness phase runs, None when it is skipped."""
    if requests < 0 or parity < 0:
        raise ConfigError("--exactness-requests and --parity-requests must be 0 or more")
    if max_tokens < 1 or not temperature > 0:
        raise ConfigError("need --exactness-max-tokens >= 1 and --exactness-temperature > 0")
    if mode not in MODES:
        raise ConfigError(f"--logprobs-mode must be one of {', '.join(MODES)}, not {mode!r}")
    rule = policy.guardrails.exactness
    if not (requests or parity) or not rule.enabled:
        return None
    return exactness.Check(
        requests=requests, parity_requests=parity, max_tokens=max_tokens,
        mode=mode, margin=rule.margin_tv, alpha=policy.alpha_kill,
        top_logprobs=rule.top_logprobs, temperature=temperature, lossy=rule.lossy,
        timeout_s=timeout_s,
    )  # fmt: skip


def _recording(rollout_id: int, database_url: str | None) -> Settings | None:
    """Return the database settings to record into, once the rollout is found (before the
    sweep, so a wrong id costs no sweep); None when no rollout was named."""
    if rollout_id < 0:
        raise ConfigError("--rollout must be a rollout id (0: do not record)")
    if not rollout_id:
        return None
    settings = settings_with(database_url)
    with cli_transaction(settings) as db:
        rollouts.get_rollout(db, rollout_id=rollout_id)
    return settings


def _record(settings: Settings, rollout_id: int, summary: dict[str, Any]) -> str:
    with cli_transaction(settings) as db:
        service.record(
            db, rollout_id=rollout_id, rehearsal=RehearsalIn.model_validate(summary),
            actor=cli_actor(),
        )  # fmt: skip
    return f"recorded as rollout {rollout_id}'s rehearsal"


def _arms(specs: list[str], model: str | None) -> list[Route]:
    """Return the candidate arms: URL or NAME=URL each, names unique and not the baseline's,
    within what a recorded summary holds (checked now, so a sweep is never unrecordable)."""
    if len(specs) > MAX_ARMS:
        raise ConfigError(f"at most {MAX_ARMS} --candidate arms, got {len(specs)}")
    found = []
    for i, spec in enumerate(specs, start=1):
        name, sep, url = spec.partition("=")
        if not sep or not name or any(c in name for c in ":/"):  # a bare URL (may hold '=')
            name, url = ("candidate" if len(specs) == 1 else f"arm{i}"), spec
        found.append(Route(name, _url("--candidate", url), model))
    names = [route.name for route in found]
    if len(set(names)) < len(names) or "baseline" in names:
        raise ConfigError(f"--candidate names must be unique and not 'baseline', got {names}")
    if any(len(name) > ARM_NAME_MAX for name in names):
        raise ConfigError(f"--candidate names must be at most {ARM_NAME_MAX} characters")
    return found


def _url(option: str, given: str) -> str:
    """Return an http(s) base URL without its trailing slash, or refuse it in one line."""
    try:
        url = httpx.URL(given)
    except httpx.InvalidURL as exc:
        raise ConfigError(f"{option} {given!r} is not a URL ({exc})") from None
    if url.scheme not in ("http", "https") or not url.host:
        raise ConfigError(f"{option} {given!r} is not an http(s) URL (http://HOST:PORT/v1)")
    return given.rstrip("/")


def _check(top: int, at: int, plan: Plan) -> None:
    if top < 1:
        raise ConfigError("--max must be at least 1")
    if at < 0:
        raise ConfigError("--at must be a concurrency (0: none)")
    if plan.budget_s <= 0:
        raise ConfigError("--budget must be positive")
    if not plan.precision > 0:
        raise ConfigError("--precision must be positive")
    if plan.min_requests < 2 or plan.max_requests < plan.min_requests:
        raise ConfigError("need 2 <= --min-requests <= --max-requests")


def _segments(specs: list[str]) -> dict[str, str]:
    """Map prompt classes to reported segment names."""
    mapping: dict[str, str] = {}
    for spec in specs:
        name, _, classes = spec.partition("=")
        for cls in (classes or name).split(","):
            if not cls.strip() or not name.strip():
                raise ConfigError(f"--segment {spec!r} is not CLASS or NAME=CLASS,CLASS")
            mapping[cls.strip()] = name.strip()
    return mapping


def _say(line: str) -> None:
    print(f"specgate rehearse: {line}", file=sys.stderr, flush=True)


def _error(message: str) -> None:
    print(f"specgate rehearse: error: {' '.join(message.split())}", file=sys.stderr)
    raise typer.Exit(int(RehearsalAnswer.ERROR))
