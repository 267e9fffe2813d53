"""Before any traffic: are the candidate's sampled tokens draws from the target's
distribution, and do its greedy answers match the baseline's?

Sampled exactness: the workload's plain-text requests are sent at temperature > 0,
unseeded, asking `top_logprobs`, to the candidate and to the baseline (the control),
one at a time and alternating. Each answer's exactness fields (`gate.exactness`) are
summed per route and judged by the per-token test of `gate.stats.exactness`, the same one
a live rollout runs: the candidate fails when a deviation beyond the policy's
`margin_tv` is proven at level `alpha`. The baseline failing the same test says the
reported log-probabilities do not describe what the engines sample (a wrong
`logprobs_mode`, a sampler patched on both routes): a data-quality alarm, never a
candidate failure, since the candidate's result then means nothing either.

Requests with tools or a `response_format` are left out: constrained decoding samples
from a distribution the reported log-probabilities do not describe.

Greedy parity: the same requests at temperature 0, answers compared token for token.
Engines are lossless only up to numerics (batching and kernels change the last bits of
a logit, and a near tie then flips), so the mismatch rate is reported, never failed on.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, Literal

import httpx

from gate.engines.workload import COMPLETIONS_PATH, WorkloadItem
from gate.exactness import exactness_fields
from gate.exactness_fit import BINS, TokenFit
from gate.exactness_position import Mode
from gate.rehearse.runner import Route
from gate.stats.exactness import TokenBins, deviation, explain, harmful

Status = Literal["exact", "deviates", "untestable"]


@dataclass(frozen=True)
class Check:
    """How the phase runs and judges: request count, sampling and the test's thresholds."""

    requests: int
    max_tokens: int
    mode: Mode
    parity_requests: int
    margin: float
    alpha: float
    top_logprobs: int = 20
    temperature: float = 0.8
    lossy: bool = False
    timeout_s: float = 120.0


@dataclass(frozen=True)
class Answer:
    """One answer as the phase reads it: its tokens (None on failure) and log-probabilities."""

    tokens: list[str] | None
    logprobs: dict[str, Any] | None = None


@dataclass(frozen=True)
class Verdict:
    """One route's exactness result, in numbers and in words."""

    status: Status
    text: str
    tokens: int = 0
    cut: int = 0
    skipped: int = 0
    answers: int = 0
    errors: int = 0
    tv: tuple[float, float, float] | None = None  # estimate, lower, upper when deviating


def total(fits: Iterable[TokenFit | None]) -> TokenBins:
    """Return the summed statistics of some calls (an untestable call adds nothing)."""
    n = cut = off = off_p = off_p2 = 0.0
    bins = [0.0] * BINS
    for fit in fits:
        if fit is None:
            continue
        n, cut = n + fit.tokens, cut + fit.cut
        off, off_p, off_p2 = off + fit.off, off_p + fit.off_p, off_p2 + fit.off_p2
        bins = [a + b for a, b in zip(bins, fit.bins, strict=True)]
    return TokenBins(n, cut, tuple(bins), off, off_p, off_p2)


def judge(fits: list[TokenFit | None], *, margin: float, alpha: float, errors: int = 0) -> Verdict:
    """Return whether the summed tokens prove a deviation beyond `margin` at `alpha`."""
    stats = total(fits)
    counted = Verdict(
        "exact", "", tokens=int(stats.n), cut=int(stats.cut), answers=len(fits), errors=errors,
        skipped=sum(f.skipped for f in fits if f is not None),
    )  # fmt: skip
    if stats.n + stats.cut <= 0:
        why = "no answer carried top_logprobs" if fits else "no answer"
        return replace(counted, status="untestable", text=f"untestable: {why}")
    if bool(harmful(stats, margin, alpha)):
        found = deviation(stats, alpha).interval
        tv = (float(found.estimate), float(found.lower), float(found.upper))
        rounded = (round(tv[0], 4), round(tv[1], 4), round(tv[2], 4))
        return replace(counted, status="deviates", text=explain(*tv), tv=rounded)
    text = f"exact: no deviation beyond TV {margin:g} over {int(stats.n)} tokens"
    return replace(counted, text=text)


def failed(candidate: Verdict, baseline: Verdict, *, lossy: bool) -> bool:
    """Return whether the candidate fails: it deviates, the control does not, not lossy."""
    return candidate.status == "deviates" and baseline.status != "deviates" and not lossy


def usable(items: list[WorkloadItem]) -> list[WorkloadItem]:
    """Return the requests whose sampling the log-probabilities describe."""
    return [i for i in items if not ({"tools", "response_format", "functions"} & set(i.body))]


def sampled_body(item: WorkloadItem, check: Check, model: str | None) -> dict[str, Any]:
    """Return the request as the phase sends it at the check's temperature, unseeded."""
    return _body(item, check, model, temperature=check.temperature, top=check.top_logprobs)


def greedy_body(item: WorkloadItem, check: Check, model: str | None) -> dict[str, Any]:
    """Return the request at temperature 0, asking each token (no alternatives)."""
    return _body(item, check, model, temperature=0.0, top=0)


def _body(
    item: WorkloadItem, check: Check, model: str | None, *, temperature: float, top: int
) -> dict[str, Any]:
    body = {k: v for k, v in item.engine_body.items() if k not in ("seed", "n", "stream_options")}
    limit = int(body.get("max_tokens") or check.max_tokens)
    body.update(temperature=temperature, stream=False, max_tokens=min(limit, check.max_tokens))
    if item.path == COMPLETIONS_PATH:
        body["logprobs"] = top
    else:
        body.update(logprobs=True, top_logprobs=top)
    return {**body, "model": model} if model else body


async def ask(client: httpx.AsyncClient, route: Route, item: WorkloadItem, body: dict[str, Any],
              timeout_s: float) -> Answer:  # fmt: skip
    """Send one request unstreamed; an HTTP error or a malformed answer is a failed one."""
    url = route.base_url + item.path.removeprefix("/v1")
    try:
        response = await client.post(url, json=body, timeout=timeout_s)
        choice = response.json()["choices"][0] if response.status_code < 400 else None
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError):
        choice = None
    if not isinstance(choice, dict):
        return Answer(None)
    logprobs = choice.get("logprobs") if isinstance(choice.get("logprobs"), dict) else None
    return Answer(_tokens(choice, logprobs), logprobs)


def _tokens(choice: dict[str, Any], logprobs: dict[str, Any] | None) -> list[str]:
    """Return the answer's tokens from its logprobs, else its text as one piece."""
    if logprobs is not None:
        content = logprobs.get("content")
        if isinstance(content, list):
            return [str(e.get("token")) for e in content if isinstance(e, dict)]
        if isinstance(logprobs.get("tokens"), list):
            return [str(t) for t in logprobs["tokens"]]
    message = choice.get("message")
    text = message.get("content") if isinstance(message, dict) else choice.get("text")
    return [str(text or "")]


def fields(answer: Answer, body: dict[str, Any], mode: Mode) -> TokenFit | None:
    """Return one answer's exactness fields under its request's sampling settings."""
    return exactness_fields(
        answer.logprobs, temperature=body.get("temperature"), top_p=body.get("top_p"),
        top_k=body.get("top_k"), mode=mode, top_logprobs=body.get("top_logprobs"),
    )  # fmt: skip


@dataclass(frozen=True)
class Parity:
    """Greedy answers compared token for token: how many matched, where the others split."""

    compared: int
    identical: int
    errors: int
    diverged_at: list[int]  # each differing answer's first differing token

    @property
    def mismatch_rate(self) -> float | None:
        """Return the share of compared answers that differ, None when none were compared."""
        return (self.compared - self.identical) / self.compared if self.compared else None

    def text(self) -> str:
        """Return the result in words."""
        if not self.compared:
            return "greedy parity: no answer pair to compare"
        return (f"greedy parity: {self.identical} of {self.compared} answers identical token "
                f"for token (mismatch rate {self.mismatch_rate:.2f})")  # fmt: skip


def compare(pairs: list[tuple[Answer, Answer]]) -> Parity:
    """Return the greedy parity of (baseline, candidate) answers."""
    both = [(b.tokens, c.tokens) for b, c in pairs if b.tokens is not None and c.tokens is not None]
    split = [_split(b, c) for b, c in both]
    diverged = [at for at in split if at is not None]
    return Parity(len(both), len(both) - len(diverged), len(pairs) - len(both), diverged)


def _split(base: list[str], cand: list[str]) -> int | None:
    """Return the first position where two token lists differ, None when they are equal."""
    if base == cand:
        return None
    same = itertools.takewhile(lambda pair: pair[0] == pair[1], zip(base, cand, strict=False))
    return sum(1 for _ in same)


@dataclass(frozen=True)
class Result:
    """The phase's outcome for both routes and the greedy parity."""

    candidate: Verdict
    baseline: Verdict
    parity: Parity
    failed: bool
    alarm: bool  # the control failed: a data-quality problem

    def summary(self, check: Check) -> dict[str, Any]:
        """Return the JSON summary's `exactness` section."""
        return {
            "requests": check.requests, "parity_requests": check.parity_requests,
            "temperature": check.temperature,
            "top_logprobs": check.top_logprobs, "max_tokens": check.max_tokens,
            "logprobs_mode": check.mode, "margin_tv": check.margin, "alpha": check.alpha,
            "lossy": check.lossy, "candidate": vars(self.candidate),
            "baseline": vars(self.baseline),
            "failed": self.failed, "control_alarm": self.alarm,
            "greedy_parity": {**vars(self.parity), "mismatch_rate": self.parity.mismatch_rate,
                              "text": self.parity.text()},
        }  # fmt: skip


async def run(
    routes: tuple[Route, Route],
    items: list[WorkloadItem],
    check: Check,
    say: Callable[[str], None],
) -> Result:
    """Run the sampled-exactness test and the greedy parity on both routes."""
    async with httpx.AsyncClient() as client:
        todo = _first(items, check.requests)
        sampled = await _each(client, routes, todo, check, sampled_body)
        say(f"exactness: {len(todo)} sampled requests per route answered")
        todo = _first(items, check.parity_requests)
        greedy = await _each(client, routes, todo, check, greedy_body)
        say(f"greedy parity: {len(todo)} requests per route answered")
    verdicts = [
        judge([fields(a, body, check.mode) for a, body in answers if a.tokens is not None],
              margin=check.margin, alpha=check.alpha,
              errors=sum(a.tokens is None for a, _ in answers))
        for answers in sampled
    ]  # fmt: skip
    base, cand = verdicts
    pairs = [(b, c) for (b, _), (c, _) in zip(*greedy, strict=True)]
    alarm = base.status == "deviates"
    return Result(cand, base, compare(pairs), failed(cand, base, lossy=check.lossy), alarm)


Sent = list[tuple[Answer, dict[str, Any]]]


def _first(items: list[WorkloadItem], count: int) -> list[WorkloadItem]:
    """Return the first `count` requests, the workload repeated as needed."""
    return list(itertools.islice(itertools.cycle(items), count)) if items else []


async def _each(
    client: httpx.AsyncClient,
    routes: tuple[Route, Route],
    items: list[WorkloadItem],
    check: Check,
    make: Callable[[WorkloadItem, Check, str | None], dict[str, Any]],
) -> tuple[Sent, Sent]:
    """Send each request to both routes in turn, one at a time (no competing load)."""
    out: tuple[Sent, Sent] = ([], [])
    for item in items:
        for side, route in enumerate(routes):
            body = make(item, check, route.model)
            out[side].append((await ask(client, route, item, body, check.timeout_s), body))
    return out
