"""What a traffic link drives: an HTTPRoute's two backends, or two LLMInferenceService members.

The gateway named on an HTTPRoute target decides whether specgate adds a mirror: request
mirroring by percent (`RequestMirror` with `percent` or `fraction`) is an extended Gateway
API feature, listed in each implementation's conformance report.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from gate.controllers.kube import ObjectRef

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_NAME = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
Name = Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_NAME)]
Namespace = Annotated[str, Field(min_length=1, max_length=63, pattern=DNS_LABEL)]


class Gateway(StrEnum):
    ENVOY_GATEWAY = "envoy-gateway"
    KGATEWAY = "kgateway"
    ISTIO = "istio"
    NGINX_GATEWAY_FABRIC = "nginx-gateway-fabric"
    GKE = "gke"
    TRAEFIK = "traefik"
    HAPROXY = "haproxy"
    AWS_LBC = "aws-lbc"
    OTHER = "other"


# Gateways whose conformance reports list HTTPRouteRequestPercentageMirror.
MIRROR_PERCENT = frozenset(
    {
        Gateway.ENVOY_GATEWAY,
        Gateway.KGATEWAY,
        Gateway.ISTIO,
        Gateway.NGINX_GATEWAY_FABRIC,
        Gateway.GKE,
    }
)


class Backend(BaseModel):
    """One backendRef of the route: a Service (with its port) or an InferencePool."""

    kind: Literal["Service", "InferencePool"] = "Service"
    name: Name
    port: int | None = Field(None, ge=1, le=65535)

    @property
    def group(self) -> str:
        """The API group the Gateway API names the backend's kind with."""
        return "inference.networking.k8s.io" if self.kind == "InferencePool" else ""

    def ref(self, namespace: str) -> ObjectRef:
        """Where the backend object lives (specgate checks it exists before weighting it)."""
        if self.kind == "InferencePool":
            return ObjectRef(self.group, "v1", "inferencepools", namespace, self.name)
        return ObjectRef("", "v1", "services", namespace, self.name)


class HttpRouteTarget(BaseModel):
    """An HTTPRoute rule with the baseline and the speculative backend."""

    kind: Literal["HTTPRoute"]
    namespace: Namespace
    name: Name
    rule: int = Field(0, ge=0, le=63, description="Index of the rule under spec.rules.")
    baseline: Backend
    speculative: Backend
    gateway: Gateway = Field(description="The Gateway API implementation serving the route.")

    @property
    def mirrors(self) -> bool:
        """Whether specgate adds a RequestMirror filter (the gateway supports its percent)."""
        return self.gateway in MIRROR_PERCENT

    def ref(self) -> ObjectRef:
        """The route's REST location."""
        return ObjectRef("gateway.networking.k8s.io", "v1", "httproutes", self.namespace, self.name)


class KServeTarget(BaseModel):
    """Two LLMInferenceServices sharing one `spec.router.route.group`."""

    kind: Literal["LLMInferenceService"]
    namespace: Namespace
    group: Annotated[str, Field(min_length=1, max_length=63, pattern=DNS_LABEL)]
    baseline: Name
    speculative: Name

    def ref(self, name: str) -> ObjectRef:
        """A member's REST location."""
        return ObjectRef(
            "serving.kserve.io", "v1alpha2", "llminferenceservices", self.namespace, name
        )


Target = Annotated[HttpRouteTarget | KServeTarget, Field(discriminator="kind")]


def notes(target: HttpRouteTarget | KServeTarget) -> list[str]:
    """What specgate cannot do on this target, in words for the operator."""
    if isinstance(target, KServeTarget):
        return [
            "LLMInferenceService has no mirror field: specgate moves weights and stops the"
            " member; pairs for the verdict need specgate's gateway in the path or a mirror"
            " on the HTTPRoute in front"
        ]
    if not target.mirrors:
        return [
            f"{target.gateway.value} does not support RequestMirror by percent: specgate"
            " moves weights only; pairs for the verdict need specgate's gateway in the path"
        ]
    return []
