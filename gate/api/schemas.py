"""Response and request bodies of the control API."""

from __future__ import annotations

import re
import uuid
from datetime import datetime
from typing import Annotated, Any, Generic, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from gate.db.enums import (
    ArmState,
    Cohort,
    Decision,
    GenerationStatus,
    PairState,
    RolloutMode,
    RolloutState,
)
from gate.rollouts.schemas import POLICY, ArmIn, PolicyDict

T = TypeVar("T")


_NUMBER = re.compile(r"[-+]?\d+(\.\d*)?([eE][-+]?\d+)?")


def _iso_only(value: object) -> object:
    # Pydantic reads a bare number as a Unix time; the OpenAPI promises ISO 8601 only.
    if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        raise ValueError("give an ISO 8601 time, e.g. 2026-11-24T19:00:00Z")
    return value


IsoTime = Annotated[datetime, BeforeValidator(_iso_only)]


class Out(BaseModel):
    model_config = ConfigDict(from_attributes=True)


class RouteOut(Out):
    id: int
    name: str
    base_url: str
    model: str
    role: str
    metrics_url: str | None
    spec_method: str | None
    spec_tokens: int | None
    draft_model: str | None
    # Where the credential comes from (header and env:/file: source), never its value.
    auth: dict[str, Any] | None = None


class ArmOut(Out):
    name: str
    route_id: int
    route: str
    state: ArmState
    added_at: datetime
    killed_at: datetime | None
    # Its weight in the gateway's choice of arm: share = weight / the active arms' sum.
    weight: float = 1.0

    @field_validator("route", mode="before")
    @classmethod
    def _route_name(cls, route: object) -> object:
        return getattr(route, "name", route)  # the row's route, or the name already


class RolloutOut(Out):
    id: int
    name: str
    alias: str
    baseline_route_id: int
    candidate_route_id: int
    mode: RolloutMode
    sample_rate: float
    stage: int
    state: RolloutState
    policy: dict[str, Any]
    version: int
    created_at: datetime
    started_at: datetime | None
    ended_at: datetime | None
    # Several candidates (issue 40); empty for a rollout of one (`candidate_route_id`).
    arms: list[ArmOut] = []


class AuditOut(Out):
    id: int
    rollout_id: int | None
    actor: str
    action: str
    reason: str
    from_state: str | None
    to_state: str | None
    details: dict[str, Any]
    created_at: datetime


class VerdictOut(Out):
    id: int
    rollout_id: int
    stage: int
    decision: Decision
    reason_codes: list[str]
    summary: str
    estimates: list[dict[str, Any]]
    n_pairs: int
    # Episodes among the tested pairs (None: no episode held two pairs; issue 39).
    episodes: int | None = None
    created_at: datetime
    # Per load band of the candidate: primary ratio, interval, both routes' loads.
    bands: list[dict[str, Any]] = []


class PairOut(Out):
    id: uuid.UUID
    rollout_id: int
    stage: int
    state: PairState
    is_control: bool
    segment: str
    created_at: datetime
    deadline: datetime


class GenerationOut(Out):
    id: int
    rollout_id: int | None
    pair_id: uuid.UUID | None
    cohort: Cohort
    route_id: int | None
    segment: str
    status: GenerationStatus
    ttft_s: float | None
    tpot_s: float | None
    e2e_s: float | None
    input_tokens: int | None
    output_tokens: int | None
    finish_reason: str | None
    spec_draft_tokens: int | None
    spec_accepted_tokens: int | None
    response_id: str | None
    started_at: datetime


class Page(BaseModel, Generic[T]):
    items: list[T]
    next_cursor: str | None = Field(None, description="Pass as `cursor` for the next page.")


class Reason(BaseModel):
    reason: str = Field(min_length=1, max_length=2000, description="Why; kept in the audit trail.")
    version: int | None = Field(None, description="Expected rollout version (409 if stale).")


class RolloutPatch(BaseModel):
    version: int = Field(description="The version you read; a stale one gets 409.")
    # strict: a JSON true, false or "0.3" is a 422, never a rate.
    sample_rate: float | None = Field(None, ge=0.0, le=1.0, strict=True)
    mode: RolloutMode | None = None
    policy: PolicyDict | None = Field(None, description=POLICY)


class ArmAdd(ArmIn):
    reason: str = Field(min_length=1, max_length=2000, description="Why; kept in the audit trail.")


class KillAll(BaseModel):
    reason: str = Field(min_length=1, max_length=2000)


class FeedbackIn(BaseModel):
    response_id: str | None = Field(
        None,
        min_length=1,
        max_length=128,
        description="The rated response's id; one served in the last 7 days (an older one is "
        "a 404: `gate.feedback.service.FEEDBACK_WINDOW`).",
    )
    pair_id: uuid.UUID | None = None
    thumbs: int | None = Field(None, description="+1 or -1.")
    score: float | None = Field(None, ge=0.0, le=1.0)
    escalated: bool = False
    comment: str | None = Field(None, max_length=4000)

    @model_validator(mode="after")
    def _target_and_rating(self) -> FeedbackIn:
        if (self.response_id is None) == (self.pair_id is None):
            raise ValueError("give exactly one of response_id or pair_id")
        if self.thumbs not in (None, 1, -1):
            raise ValueError("thumbs must be 1 or -1")
        if self.thumbs is None and self.score is None and not self.escalated:
            raise ValueError("give thumbs, a score or escalated=true")
        return self


class FeedbackOut(Out):
    id: int
    generation_id: int | None
    pair_id: uuid.UUID | None
    thumbs: int | None
    score: float | None
    escalated: bool
    created_at: datetime
