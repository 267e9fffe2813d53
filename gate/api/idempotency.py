"""Idempotency keys for every POST of the control API: a retry replays the first answer."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import timedelta
from typing import Annotated, TypeVar, cast

from fastapi import Header, Request
from pydantic import BaseModel
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from gate.db.base import utcnow
from gate.db.models import IdempotencyKey
from gate.errors import BadRequest, Conflict

T = TypeVar("T")
HEADER = "Idempotency-Key"
MAX_KEY = 128
KeyHeader = Annotated[
    str | None,
    Header(
        alias=HEADER,
        min_length=1,
        max_length=MAX_KEY,
        description="Retry-safe key: a retry with the same key and body replays the first "
        "answer; the same key with another body is 409.",
    ),
]


def run_once(
    db: Session,
    *,
    key: str | None,
    actor: str,
    request: Request,
    body: BaseModel,
    work: Callable[[], T],
) -> T:
    """Do `work` once per (key, actor); replay its JSON answer for a retry of the request."""
    if key is None:
        return work()
    if not key:
        raise BadRequest(f"{HEADER} must be 1 to {MAX_KEY} characters")
    path = request.url.path
    digest = hashlib.sha256(f"POST {path}\0{body.model_dump_json()}".encode()).hexdigest()
    stored = db.scalars(
        select(IdempotencyKey).where(IdempotencyKey.key == key, IdempotencyKey.actor == actor)
    ).first()
    if stored is not None:
        if stored.request_hash != digest:
            raise Conflict(f"{HEADER} {key!r} was already used for a different request")
        return cast(T, stored.response)
    answer = work()
    row = IdempotencyKey(
        key=key,
        actor=actor,
        method="POST",
        path=path,
        request_hash=digest,
        status_code=200,
        response=answer,
    )
    db.add(row)
    db.flush()
    return answer


def purge_keys(db: Session, *, max_age_s: float) -> int:
    """Delete keys older than `max_age_s`; return how many went."""
    cut = utcnow() - timedelta(seconds=max_age_s)
    result = db.execute(delete(IdempotencyKey).where(IdempotencyKey.created_at < cut))
    return int(getattr(result, "rowcount", 0) or 0)
