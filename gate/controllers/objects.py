"""The traffic objects' shapes: the fields specgate owns in each, how it sets them, and how
their status says a change is applied.

An HTTPRoute rule's two backendRefs carry proportional weights; specgate's mirror is a
rule-level `RequestMirror` filter to the speculative backend. An LLMInferenceService member
carries `spec.router.route.{group,weight}`; `serving.kserve.io/stop: "true"` scales it to
zero and keeps its weight for rollback. The "view" of an object is only the fields specgate
owns: it tells specgate's own writes from anyone else's. A `Driver` does all of this for
one link's objects.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from gate.controllers.kube import Body, KubeApi, ObjectRef
from gate.controllers.targets import Backend, HttpRouteTarget, KServeTarget

# Weights are written out of this total: a share of 1 % is a weight of 100.
TOTAL = 10_000
STOP = "serving.kserve.io/stop"
MIRROR = "RequestMirror"


@dataclass(frozen=True)
class Desired:
    """What the objects should say: the speculative weight, the mirrored share, stopped."""

    weight: int
    mirror: float
    stop: bool


@dataclass(frozen=True)
class Check:
    """What an object's status says about specgate's last write."""

    applied: bool
    failed: str | None = None


PENDING = Check(applied=False)


Objects = dict[str, Body]


class Shape(Exception):
    """The object is not shaped as the link says (a backend or rule is missing)."""


def route_view(route: Body, target: HttpRouteTarget) -> dict[str, Any]:
    """The route rule's backends with weights, and its mirror filters."""
    rule = _rule(route, target)
    backends = sorted(
        [b.get("group", ""), b.get("kind", "Service"), b["name"], b.get("weight", 1)]
        for b in rule.get("backendRefs") or []
    )
    mirrors = sorted(
        [f["requestMirror"]["backendRef"]["name"], _mirror_share(f["requestMirror"])]
        for f in rule.get("filters") or []
        if f.get("type") == MIRROR
    )
    return {"backends": backends, "mirrors": mirrors}


def route_apply(route: Body, target: HttpRouteTarget, desired: Desired) -> Body:
    """Return the route with the rule's weights and mirror set as `desired` says."""
    out = copy.deepcopy(route)
    rule = _rule(out, target)
    refs = rule.setdefault("backendRefs", [])
    base = _find(refs, target.baseline)
    if base is None:
        raise Shape(f"rule {target.rule} has no backendRef {target.baseline.name}")
    share = desired.mirror if target.mirrors else 0.0
    spec = _find(refs, target.speculative)
    # A speculative backend the rule lacks is added only to carry weight or a mirror.
    if spec is None and (desired.weight or share):
        spec = _backend_ref(target.speculative)
        refs.append(spec)
    base["weight"] = TOTAL - desired.weight
    if spec is not None:
        spec["weight"] = desired.weight
    kept = [
        f
        for f in rule.get("filters") or []
        if not (
            f.get("type") == MIRROR
            and f["requestMirror"]["backendRef"]["name"] == target.speculative.name
        )
    ]
    if share > 0:
        kept.append({"type": MIRROR, "requestMirror": _mirror(target.speculative, share)})
    if kept:
        rule["filters"] = kept
    else:
        rule.pop("filters", None)
    return out


def route_check(route: Body) -> Check:
    """Applied when every parent Accepted the route and ResolvedRefs at its generation."""
    generation = route["metadata"].get("generation", 0)
    parents = (route.get("status") or {}).get("parents") or []
    if not parents:
        return PENDING
    for parent in parents:
        check = _conditions(
            parent.get("conditions") or [], generation, ("Accepted", "ResolvedRefs")
        )
        if not check.applied:
            return check
    return Check(applied=True)


def member_view(member: Body) -> dict[str, Any]:
    """A member's group, weight and stop annotation."""
    route = ((member.get("spec") or {}).get("router") or {}).get("route") or {}
    annotations = member["metadata"].get("annotations") or {}
    return {
        "group": route.get("group"),
        "weight": route.get("weight"),
        "stop": annotations.get(STOP),
    }


def member_apply(
    member: Body, target: KServeTarget, *, weight: int | None, stop: bool | None
) -> Body:
    """Return the member with its route weight and stop annotation set (None: kept)."""
    out = copy.deepcopy(member)
    route = out.setdefault("spec", {}).setdefault("router", {}).setdefault("route", {})
    route["group"] = target.group
    if weight is not None:
        route["weight"] = weight
    annotations = out["metadata"].setdefault("annotations", {})
    if stop:
        annotations[STOP] = "true"
    elif stop is False:
        annotations.pop(STOP, None)
    if not annotations:
        out["metadata"].pop("annotations")
    return out


def member_check(member: Body, *, stopped: bool) -> Check:
    """Applied once KServe observed the generation and (unless stopped) the member is Ready."""
    generation = member["metadata"].get("generation", 0)
    status = member.get("status") or {}
    if status.get("observedGeneration", 0) < generation:
        return PENDING
    if stopped:
        return Check(applied=True)
    return _conditions(status.get("conditions") or [], generation, ("Ready",), observed=True)


def _conditions(
    conditions: list[Body], generation: int, wanted: tuple[str, ...], *, observed: bool = False
) -> Check:
    by_type = {c.get("type"): c for c in conditions}
    for kind in wanted:
        condition = by_type.get(kind)
        if condition is None:
            return PENDING
        current = observed or condition.get("observedGeneration", 0) >= generation
        if not current:
            return PENDING
        if condition.get("status") != "True":
            why = f"{kind} is {condition.get('status')}: {condition.get('reason', '')}"
            return Check(applied=False, failed=f"{why} {condition.get('message', '')}".strip())
    return Check(applied=True)


def _rule(route: Body, target: HttpRouteTarget) -> Body:
    rules = (route.get("spec") or {}).get("rules") or []
    if target.rule >= len(rules):
        raise Shape(f"the route has no rule {target.rule}")
    rule: Body = rules[target.rule]
    return rule


def _find(refs: list[Body], backend: Backend) -> Body | None:
    for ref in refs:
        if ref["name"] == backend.name and ref.get("kind", "Service") == backend.kind:
            return ref
    return None


def _backend_ref(backend: Backend) -> Body:
    ref: Body = {"group": backend.group, "kind": backend.kind, "name": backend.name}
    if backend.port is not None:
        ref["port"] = backend.port
    return ref


def _mirror(backend: Backend, share: float) -> Body:
    mirror: Body = {"backendRef": _backend_ref(backend)}
    percent = share * 100
    if abs(percent - round(percent)) < 1e-9:
        mirror["percent"] = round(percent)
    else:
        mirror["fraction"] = {"numerator": round(share * TOTAL), "denominator": TOTAL}
    return mirror


def _mirror_share(mirror: Body) -> float:
    if "fraction" in mirror:
        fraction = mirror["fraction"]
        return round(float(fraction["numerator"]) / float(fraction.get("denominator", 100)), 6)
    return round(float(mirror.get("percent", 100)) / 100, 6)


class Hold(Exception):
    """The pass cannot go on safely: hold a running rollout with this reason."""


class Driver:
    """One link's objects: read them, view the fields specgate owns, set them, check them."""

    def __init__(self, target: HttpRouteTarget | KServeTarget, api: KubeApi) -> None:
        self.target = target
        self.api = api

    @property
    def mirrors(self) -> bool:
        """Whether specgate writes a mirror on this target."""
        return isinstance(self.target, HttpRouteTarget) and self.target.mirrors

    def names(self) -> list[str]:
        """The objects' names."""
        if isinstance(self.target, HttpRouteTarget):
            return [self.target.name]
        return [self.target.baseline, self.target.speculative]

    def ref(self, name: str) -> ObjectRef:
        """One object's REST location."""
        if isinstance(self.target, HttpRouteTarget):
            return self.target.ref()
        return self.target.ref(name)

    def describe(self) -> str:
        """Say which"""
        return " and ".join(self.ref(n).describe() for n in self.names())

    def read(self) -> Objects:
        """GET every object; a missing one holds."""
        found = {}
        for name in self.names():
            body = self.api.get(self.ref(name))
            if body is None:
                raise Hold(f"{self.ref(name).describe()} does not exist")
            found[name] = body
        return found

    def view(self, current: Objects) -> Any:
        """The fields specgate owns, across the"""
        try:
            if isinstance(self.target, HttpRouteTarget):
                return route_view(current[self.target.name], self.target)
            return {n: member_view(b) for n, b in current.items()}
        except Shape as exc:
            raise Hold(f"{self.describe()}: {exc}") from exc

    def apply(self, current: Objects, desired: Desired) -> Objects:
        """Every object as `desired` says."""
        target = self.target
        try:
            if isinstance(target, HttpRouteTarget):
                return {target.name: route_apply(current[target.name], target, desired)}
        except Shape as exc:
            raise Hold(f"{self.describe()}: {exc}") from exc
        spec = target.speculative
        if desired.stop:
            return {
                target.baseline: current[target.baseline],
                spec: member_apply(current[spec], target, weight=None, stop=True),
            }
        return {
            target.baseline: member_apply(
                current[target.baseline], target, weight=TOTAL - desired.weight, stop=None
            ),
            spec: member_apply(current[spec], target, weight=desired.weight, stop=False),
        }

    def check(self, name: str, body: Body) -> Check:
        """What the object's status says about the last write."""
        if isinstance(self.target, HttpRouteTarget):
            return route_check(body)
        stopped = (body["metadata"].get("annotations") or {}).get(STOP) == "true"
        return member_check(body, stopped=stopped)

    def require_backend(self) -> None:
        """Hold rather than weight a backend that does not exist (its share would get 500s)."""
        if isinstance(self.target, HttpRouteTarget):
            ref = self.target.speculative.ref(self.target.namespace)
            if self.api.get(ref) is None:
                raise Hold(f"the speculative backend {ref.describe()} does not exist")
