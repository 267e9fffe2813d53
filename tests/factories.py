"""Rows for tests, built through the services where one exists."""

from __future__ import annotations

import uuid
from datetime import timedelta

from sqlalchemy.orm import Session

from gate.db.base import utcnow
from gate.db.enums import Cohort, GenerationStatus, RolloutMode, RouteRole
from gate.db.models import Generation, Pair, Rollout
from gate.rollouts import service
from gate.rollouts.schemas import RolloutIn, RouteIn


def rollout(
    session: Session,
    *,
    name: str = "r1",
    mode: RolloutMode = RolloutMode.SHADOW,
    base_url: str = "http://127.0.0.1:9/v1",
    candidate_url: str = "http://127.0.0.1:9/v1",
    sample_rate: float = 0.1,
    policy: dict[str, object] | None = None,
) -> Rollout:
    urls = {"base": base_url, "spec": candidate_url}
    for suffix, role in (("base", RouteRole.BASELINE), ("spec", RouteRole.CANDIDATE)):
        service.create_route(
            session,
            spec=RouteIn(name=f"{name}-{suffix}", base_url=urls[suffix], model="m", role=role),
            actor="test",
        )
    spec = RolloutIn(
        name=name,
        alias=name,
        baseline_route=f"{name}-base",
        candidate_route=f"{name}-spec",
        mode=mode,
        sample_rate=sample_rate,
        policy=policy or {},
    )
    return service.create_rollout(session, spec=spec, actor="test")


def pair(
    session: Session, rollout_id: int, *, is_control: bool = False, deadline_in_s: float = 300.0
) -> Pair:
    row = Pair(
        id=uuid.uuid4(),
        rollout_id=rollout_id,
        is_control=is_control,
        deadline=utcnow() + timedelta(seconds=deadline_in_s),
    )
    session.add(row)
    session.flush()
    return row


def generation(
    session: Session,
    pair_row: Pair,
    cohort: Cohort,
    *,
    status: GenerationStatus = GenerationStatus.OK,
    output: str = "ok",
) -> Generation:
    row = Generation(
        rollout_id=pair_row.rollout_id,
        pair_id=pair_row.id,
        cohort=cohort,
        status=status,
        output=output,
        trace_id=uuid.uuid4().hex,
        span_id=uuid.uuid4().hex[:16],
    )
    session.add(row)
    session.flush()
    return row
