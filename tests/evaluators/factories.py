"""Rows for evaluator tests: a rollout with its routes, and a pair with its sides."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from gate.db.enums import PairState, RolloutMode, RouteRole
from gate.db.models import Generation, Pair, RequestRecord, Rollout, Route

CONTEXT = "The Halden line opened in 1879 and runs 167 km from Oslo to Halden."
BODY = {
    "model": "llama",
    "temperature": 0,
    "messages": [{"role": "user", "content": "When did the Halden line open?"}],
}
INPUTS = {"context": [CONTEXT], "reference": "1879", "checks": [{"type": "numeric"}]}
RIGHT = "The Halden line opened in 1879."


def make_rollout(session, policy=None) -> Rollout:
    routes = [
        Route(
            name=f"r-{role.value}-{uuid.uuid4().hex[:6]}",
            base_url="http://127.0.0.1:9/v1",
            model="llama",
            role=role,
        )
        for role in (RouteRole.BASELINE, RouteRole.CANDIDATE)
    ]
    session.add_all(routes)
    session.flush()
    rollout = Rollout(
        name=f"ngram-{uuid.uuid4().hex[:6]}",
        alias="llama",
        baseline_route_id=routes[0].id,
        candidate_route_id=routes[1].id,
        mode=RolloutMode.SHADOW,
        policy=policy or {},
    )
    session.add(rollout)
    session.flush()
    return rollout


def make_pair(session, rollout, sides, *, state=PairState.COMPLETE, body=BODY, inputs=INPUTS):
    request = RequestRecord(id=uuid.uuid4(), rollout_id=rollout.id, body=body, inputs=inputs)
    session.add(request)
    session.flush()
    now = datetime.now(UTC)
    pair = Pair(
        id=uuid.uuid4(),
        rollout_id=rollout.id,
        request_id=request.id,
        state=state,
        deadline=now + timedelta(minutes=5),
    )
    session.add(pair)
    session.flush()
    for cohort, output, status in sides:
        session.add(
            Generation(
                rollout_id=rollout.id,
                pair_id=pair.id,
                request_id=request.id,
                cohort=cohort,
                status=status,
                output=output,
                finish_reason="stop",
                temperature=0.0,
            )
        )
    session.flush()
    return pair
