"""The controllers' side, played by their documented logic over real HTTP.

Argo Rollouts (web metric provider, v1.8+): each measurement GETs the URL; a non-2xx answer
or a transport failure is an Error; the `jsonPath` value is `result`; `failureCondition`
true -> Failed, else `successCondition` true -> Successful, else Inconclusive. The metric is
Failed once failed > failureLimit (unless -1), Inconclusive once inconclusive >
inconclusiveLimit, Error once consecutive errors > consecutiveErrorLimit, Successful once
consecutive successes reach consecutiveSuccessLimit (when > 0); at `count` measurements it
is Successful, or, with consecutiveSuccessLimit in force, Failed (failureLimit -1) or
Inconclusive. An inline analysis step: Successful -> next step, Failed/Error -> abort,
Inconclusive -> pause.

Flagger (blue/green, kubernetes provider), one scheduler pass per interval, after
fluxcd/flagger `pkg/controller/scheduler.go` and `scheduler_hooks.go`: confirm-rollout gates
a revision's start and is sent the Canary's phase (Failed after a rollback); once it passes,
the pass ends with the Canary Progressing; while progressing or waiting, a 2xx `rollback`
hook rolls back; failed checks >= threshold roll back; the first pass runs pre-rollout,
later ones the `rollout` hooks (a non-2xx is a failed check); after `iterations` passes,
confirm-promotion must answer 2xx, else Flagger waits; promotion and rollback end with
post-rollout hooks (phase Succeeded or Failed). Every Kubernetes Event Flagger records on
the way also goes to the `event` hooks, with the Canary's phase when it was recorded
(`events.go`, `CallEventWebhook`): "Confirm-rollout check ... passed" of a revision after a
rollback carries phase Failed. Every payload carries `checksum`, a hash of the Canary's
`Status.LastAppliedSpec` (`webhook.go` `canaryChecksum`), which Flagger syncs to the
target's spec once confirm-rollout passed: confirm-rollout and the Events before that
sync carry the previous revision's. A spec change while Progressing or WaitingPromotion
restarts the analysis under the same Canary and webhooks ("New revision detected!
Restarting analysis", then the status is synced with iterations and failed checks at 0).
The harness reads every setting from the shipped manifests.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

import httpx
import yaml

from tests.deploy.compose import ROOT

CONTROLLERS = ROOT / "deploy" / "k8s" / "controllers"
IN_CLUSTER = "http://specgate-gateway.specgate.svc.cluster.local:8080"
DEFAULT_CONSECUTIVE_ERROR_LIMIT = 4
CONDITION = re.compile(r'^result\s*==\s*"([^"]*)"$')
JSON_PATH = re.compile(r"^\{\$\.([A-Za-z_][\w.]*)\}$")
ARGS = re.compile(r"\{\{\s*args\.([\w-]+)\s*\}\}")


def manifest(folder: str, name: str) -> dict[str, Any]:
    """Return the one document of an example file."""
    return yaml.safe_load((CONTROLLERS / folder / name).read_text())


def _condition(text: str, result: object) -> bool:
    match = CONDITION.match(text.strip())
    assert match, f'the harness evaluates `result == "..."` conditions only, not {text!r}'
    return result == match.group(1)


def _lookup(body: Any, json_path: str) -> object:
    match = JSON_PATH.match(json_path)
    assert match, f"the harness reads `{{$.a.b}}` paths only, not {json_path!r}"
    for part in match.group(1).split("."):
        body = body[part]
    return body


@dataclass
class ArgoMetric:
    """One web metric of an AnalysisRun and its counters."""

    spec: dict[str, Any]
    url: str
    headers: dict[str, str]
    successful: int = 0
    failed: int = 0
    inconclusive: int = 0
    count: int = 0
    consecutive_errors: int = 0
    consecutive_successes: int = 0
    phase: str = "Running"
    values: list[object] = field(default_factory=list)

    @classmethod
    def from_template(cls, template: dict[str, Any], base: str, **given: str) -> ArgoMetric:
        """Instantiate the template's metric as an AnalysisRun would, against `base`."""
        args = {a["name"]: a.get("value") for a in template["spec"]["args"]} | given
        metric = template["spec"]["metrics"][0]
        web = metric["provider"]["web"]

        def resolve(text: str) -> str:
            return ARGS.sub(lambda m: str(args[m.group(1)]), text).replace(IN_CLUSTER, base)

        headers = {h["key"]: resolve(h["value"]) for h in web.get("headers", [])}
        return cls(spec=metric, url=resolve(web["url"]), headers=headers)

    def limit(self, name: str, default: int = 0) -> int:
        return int(self.spec.get(name, default))

    def measure(self, client: httpx.Client) -> str:
        """Take one measurement, update the counters and return its phase."""
        try:
            response = client.get(self.url, headers=self.headers)
            ok = 200 <= response.status_code < 300
            result = (
                _lookup(response.json(), self.spec["provider"]["web"]["jsonPath"]) if ok else None
            )
        except (httpx.HTTPError, ValueError, KeyError):
            ok, result = False, None
        if not ok:
            self.consecutive_errors += 1
            return "Error"
        self.values.append(result)
        self.consecutive_errors, self.count = 0, self.count + 1
        if _condition(self.spec["failureCondition"], result):
            phase, self.failed, self.consecutive_successes = "Failed", self.failed + 1, 0
        elif _condition(self.spec["successCondition"], result):
            phase, self.successful = "Successful", self.successful + 1
            self.consecutive_successes += 1
        else:
            phase, self.inconclusive, self.consecutive_successes = (
                "Inconclusive", self.inconclusive + 1, 0,
            )  # fmt: skip
        return phase

    def assess(self) -> str:
        """Return the metric's phase after the last measurement."""
        failure_limit = self.limit("failureLimit")
        success_limit = self.limit("consecutiveSuccessLimit")
        if failure_limit >= 0 and self.failed > failure_limit:
            return "Failed"
        if self.inconclusive > self.limit("inconclusiveLimit"):
            return "Inconclusive"
        if self.consecutive_errors > self.limit(
            "consecutiveErrorLimit", DEFAULT_CONSECUTIVE_ERROR_LIMIT
        ):
            return "Error"
        if success_limit > 0 and self.consecutive_successes >= success_limit:
            return "Successful"
        if self.count >= self.limit("count", 1):
            if success_limit > 0:
                return "Failed" if failure_limit < 0 else "Inconclusive"
            return "Successful"
        return "Running"

    def step(self, client: httpx.Client) -> str:
        """One interval: measure, then assess; return the metric's phase."""
        if self.phase == "Running":
            self.measure(client)
            self.phase = self.assess()
        return self.phase


ROLLOUT_STEP = {"Successful": "next step", "Failed": "abort", "Error": "abort"}


def rollout_outcome(phase: str) -> str:
    """What an inline analysis step does to the Rollout for a metric phase."""
    return ROLLOUT_STEP.get(phase, "paused" if phase == "Inconclusive" else "waiting")


@dataclass
class FlaggerCanary:
    """A Canary's analysis loop, the webhooks it calls and the Events it sends."""

    spec: dict[str, Any]
    base: str
    client: httpx.Client
    phase: str = "Initializing"
    failed_checks: int = 0
    iterations: int = 0
    started: bool = False
    # A new revision was applied while the Canary is Failed or Succeeded.
    revision: bool = False
    # The target's spec (its version), and the one the Canary's status was last synced to.
    generation: int = 1
    applied: int = 0
    calls: list[tuple[str, int]] = field(default_factory=list)
    events: list[tuple[str, str, int]] = field(default_factory=list)

    @property
    def analysis(self) -> dict[str, Any]:
        return dict(self.spec["spec"]["analysis"])

    @property
    def target(self) -> str:
        meta = self.spec["metadata"]
        return f"{meta['name']}.{meta['namespace']}"

    @property
    def checksum(self) -> str:
        """What Flagger sends as `checksum`: a hash of the last applied spec."""
        return hashlib.sha256(f"{self.target}/{self.applied}".encode()).hexdigest()[:10]

    def hook_name(self, kind: str) -> str:
        return next(h["name"] for h in self.analysis["webhooks"] if h["type"] == kind)

    def call(self, kind: str, phase: str | None = None) -> bool:
        """POST every webhook of `kind`; True when all answered 2xx."""
        ok = True
        for hook in (h for h in self.analysis["webhooks"] if h["type"] == kind):
            status = self._post(hook, phase or self.phase, hook.get("metadata", {}))
            self.calls.append((kind, status))
            ok = ok and 200 <= status < 300
        return ok

    def emit(self, message: str, *, warning: bool = False, phase: str | None = None) -> None:
        """Send an Event to the `event` hooks, with the Canary's phase (or the copy's)."""
        kind = "Warning" if warning else "Normal"
        for hook in (h for h in self.analysis["webhooks"] if h["type"] == "event"):
            metadata = {"eventMessage": message, "eventType": kind, "timestamp": "0"}
            metadata |= {k: v for k, v in hook.get("metadata", {}).items() if k not in metadata}
            status = self._post(hook, phase or self.phase, metadata)
            self.events.append((phase or self.phase, message, status))

    def new_revision(self, token: str, rollout: str) -> None:
        """Apply a new revision, its webhooks rendered for a new specgate rollout and token."""
        for hook in self.analysis["webhooks"]:
            hook["url"] = hook["url"].rsplit("/", 1)[0] + "/" + token
            hook.setdefault("metadata", {})["rollout"] = rollout
        self.revision, self.started, self.failed_checks, self.iterations = True, False, 0, 0
        self.generation += 1

    def change_spec(self) -> None:
        """Apply a new revision of the target mid-analysis (same Canary, same webhooks)."""
        self.generation += 1

    def tick(self) -> str:
        """One scheduler pass; return the phase."""
        if self.phase in ("Succeeded", "Failed") and not self.revision:
            return self.phase
        if self.revision or self.phase in ("Initializing", "Waiting"):
            return self._confirm_rollout()
        if self.generation != self.applied:
            return self._restart()
        if self.call("rollback"):
            self.emit(f"Rollback check {self.hook_name('rollback')} passed", warning=True)
            self.emit(f"Rolling back {self.target} manual webhook invoked", warning=True)
            return self._end("Failed")
        self.emit(f"Rollback hook {self.hook_name('rollback')} not signaling a rollback")
        if self.failed_checks >= int(self.analysis["threshold"]):
            self.emit(
                f"Rolling back {self.target} failed checks threshold reached {self.failed_checks}",
                warning=True,
            )
            return self._end("Failed")
        if not self._check():
            self.failed_checks += 1
            return self.phase
        self.started = True
        if self.iterations < int(self.analysis["iterations"]):
            self.iterations += 1
            self.emit(f"Advance {self.target} canary iteration {self.iterations}")
            return self.phase
        if not self.call("confirm-promotion"):
            if self.phase != "WaitingPromotion":
                self.phase = "WaitingPromotion"
                self.emit(f"Halt {self.target} advancement waiting for promotion", warning=True)
            return self.phase
        return self._end("Succeeded")

    def _confirm_rollout(self) -> str:
        # Flagger sends confirm-rollout the Canary's phase: Failed after a rollback.
        if not self.call("confirm-rollout"):
            if self.phase != "Waiting":
                self.phase = "Waiting"
                self.emit(f"Halt {self.target} advancement waiting for approval", warning=True)
            return self.phase
        self.emit(f"Confirm-rollout check {self.hook_name('confirm-rollout')} passed")
        self.emit(f"New revision detected! Scaling up {self.target}", phase="Progressing")
        self.phase, self.revision, self.applied = "Progressing", False, self.generation
        return self.phase

    def _restart(self) -> str:
        # The Event goes out before the status sync: it carries the old revision's checksum.
        self.emit(f"New revision detected! Restarting analysis for {self.target}")
        self.phase, self.applied, self.started = "Progressing", self.generation, False
        self.failed_checks, self.iterations = 0, 0
        return self.phase

    def _check(self) -> bool:
        """Run pre-rollout on the first pass, else the `rollout` hooks."""
        kind = "rollout" if self.started else "pre-rollout"
        if self.call(kind):
            return True
        what = "external" if self.started else "pre-rollout"
        self.emit(
            f"Halt {self.target} advancement {what} check {self.hook_name(kind)} failed",
            warning=True,
        )
        return False

    def _end(self, phase: str) -> str:
        if phase == "Failed":
            self.emit(f"Canary failed! Scaling down {self.target}", warning=True, phase=phase)
        self.phase = phase
        self.call("post-rollout", phase)
        return phase

    def _post(self, hook: dict[str, Any], phase: str, metadata: dict[str, Any]) -> int:
        meta = self.spec["metadata"]
        payload = {"name": meta["name"], "namespace": meta["namespace"], "phase": phase,
                   "checksum": self.checksum, "metadata": metadata}  # fmt: skip
        try:
            url = hook["url"].replace(IN_CLUSTER, self.base)
            return self.client.post(url, json=payload).status_code
        except httpx.HTTPError:
            return 0
