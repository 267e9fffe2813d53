"""Validated inputs for creating routes and rollouts."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, HttpUrl, field_validator

from gate.db.enums import RolloutMode, RouteRole
from gate.routing.credentials import DEFAULT_HEADER, HEADER_PATTERN, SOURCE_PATTERN, check_header


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

    name: str = Field(min_length=1, max_length=128)
    base_url: HttpUrl
    model: str = Field(min_length=1, max_length=256)
    role: RouteRole
    metrics_url: HttpUrl | None = None
    spec_method: str | None = Field(None, max_length=32)
    spec_tokens: int | None = Field(None, ge=1, le=64)
    draft_model: str | None = Field(None, max_length=256)
    spec_config: dict[str, Any] = Field(default_factory=dict)
    # "Authorization: Bearer <secret>" (or the raw secret under another header).
    auth: RouteAuth | None = None


class RolloutIn(BaseModel):
    """A rollout of a candidate route beside a baseline route, under one model alias."""

    name: str = Field(min_length=1, max_length=128)
    alias: str = Field(min_length=1, max_length=256)
    baseline_route: str
    candidate_route: str
    mode: RolloutMode = RolloutMode.SHADOW
    sample_rate: float = Field(0.1, ge=0.0, le=1.0, strict=True)
    policy: dict[str, Any] = Field(default_factory=dict)
