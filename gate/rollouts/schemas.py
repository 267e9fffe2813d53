"""Validated inputs for creating routes and rollouts."""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    Field,
    GetJsonSchemaHandler,
    HttpUrl,
    field_validator,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from gate.db.enums import RolloutMode, RouteRole
from gate.routing.credentials import DEFAULT_HEADER, HEADER_PATTERN, SOURCE_PATTERN, check_header
from gate.stats.policy import Policy

# Postgres text and JSON cannot hold U+0000: refused here (422), and the schema says so.
NO_NUL = r"^[^\x00]*$"
SPEC_CONFIG = (
    "The route's speculative settings as given, any JSON object; its keys and strings must "
    "not contain U+0000 and its numbers must be finite (no database stores either): 422."
)
POLICY = (
    "The gate policy; fields left out take their defaults, an unknown one is refused. Beyond "
    "this schema (422): stages rise strictly within (0, 100], segments are unique and exclude "
    "'all' and 'undeclared', segment_floors name declared segments, and the evaluators named "
    "exist and take the options given."
)


# An arm's name is what pair records carry (`arm`): short, and plain in a URL path.
ARM_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
MAX_ARMS = 8
ARMS = (
    "Several candidate routes (arms), instead of `candidate_route`; each sampled request "
    "is mirrored to one of the active arms, the same one for every request of an episode. "
    f"1 to {MAX_ARMS} arms, names and routes unique, shadow mode only: 422."
)


class _AsPolicy:
    """Publish a mapping as the `Policy` model's own JSON Schema (its parts as components)."""

    def __get_pydantic_json_schema__(
        self, _schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return handler(Policy.__pydantic_core_schema__)


# The gate policy as the caller gave it (kept so: the defaults apply when it is read),
# checked by `gate.rollouts.service.check_policy`.
PolicyDict = Annotated[dict[str, Any], _AsPolicy()]


class RouteAuth(BaseModel):
    """Where a route's credential comes from; never the secret itself."""

    header: str = Field(DEFAULT_HEADER, pattern=HEADER_PATTERN)
    # env:NAME (an environment variable of the gateway and collector processes) or
    # file:/path (a mounted secret file, read again at every routing refresh).
    source: str = Field(pattern=SOURCE_PATTERN)

    @field_validator("header")
    @classmethod
    def _not_reserved(cls, header: str) -> str:
        return check_header(header)


class RouteIn(BaseModel):
    """A route: one OpenAI-compatible endpoint serving one model configuration."""

    name: str = Field(min_length=1, max_length=128, pattern=NO_NUL)
    base_url: HttpUrl
    model: str = Field(min_length=1, max_length=256, pattern=NO_NUL)
    role: RouteRole
    metrics_url: HttpUrl | None = None
    spec_method: str | None = Field(None, max_length=32, pattern=NO_NUL)
    spec_tokens: int | None = Field(None, ge=1, le=64)
    draft_model: str | None = Field(None, max_length=256, pattern=NO_NUL)
    spec_config: dict[str, Any] = Field(default_factory=dict, description=SPEC_CONFIG)
    # "Authorization: Bearer <secret>" (or the raw secret under another header).
    auth: RouteAuth | None = None

    @field_validator("spec_config")
    @classmethod
    def _storable(cls, config: dict[str, Any]) -> dict[str, Any]:
        _check_storable(config)
        return config


class ArmIn(BaseModel):
    """One candidate of a rollout with several: the name its pairs carry, and its route."""

    name: str = Field(pattern=ARM_NAME, description="Letters, digits, '.', '_', '-'; 1-64.")
    route: str = Field(min_length=1, max_length=128, pattern=NO_NUL)


class RolloutIn(BaseModel):
    """A rollout of a candidate route, or of several (arms), beside a baseline route,
    under one model alias."""

    name: str = Field(min_length=1, max_length=128, pattern=NO_NUL)
    alias: str = Field(min_length=1, max_length=256, pattern=NO_NUL)
    baseline_route: str = Field(pattern=NO_NUL)
    candidate_route: str | None = Field(None, pattern=NO_NUL)
    arms: list[ArmIn] | None = Field(None, description=ARMS)
    mode: RolloutMode = RolloutMode.SHADOW
    sample_rate: float = Field(0.1, ge=0.0, le=1.0, strict=True)
    policy: PolicyDict = Field(default_factory=dict, description=POLICY)

    @model_validator(mode="after")
    def _one_candidate_or_arms(self) -> RolloutIn:
        if (self.candidate_route is None) == (self.arms is None):
            raise ValueError("give exactly one of candidate_route or arms")
        if self.arms is not None:
            check_arms(self.arms, self.mode)
        return self


def check_arms(arms: list[ArmIn], mode: RolloutMode) -> None:
    """Refuse arms that are too few or many, named or routed twice, or in canary mode."""
    if not 1 <= len(arms) <= MAX_ARMS:
        raise ValueError(f"give 1 to {MAX_ARMS} arms, not {len(arms)}")
    for what, values in (("name", [a.name for a in arms]), ("route", [a.route for a in arms])):
        twice = sorted({v for v in values if values.count(v) > 1})
        if twice:
            raise ValueError(f"each arm needs its own {what}: {', '.join(twice)} given twice")
    if mode is not RolloutMode.SHADOW:
        # A canary serves users from its candidate: which arm would answer them is the
        # choice the arms are there to make.
        raise ValueError("arms are compared in shadow mode only")


def _check_storable(value: Any) -> None:
    """Refuse a NUL in a key or string, or a number that is not finite, at any depth."""
    if isinstance(value, str) and "\x00" in value:
        raise ValueError("keys and strings must not contain U+0000")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"numbers must be finite, not {value}")
    if isinstance(value, dict):
        for key, item in value.items():
            _check_storable(key)
            _check_storable(item)
    elif isinstance(value, list):
        for item in value:
            _check_storable(item)
