"""Idempotency keys for state-changing POSTs: a retry replays the first answer."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gate.db.models import IdempotencyKey
from gate.errors import BadRequest, Conflict

HEADER = "Idempotency-Key"
MAX_KEY = 128


def run_once(
    db: Session,
    *,
    key: str | None,
    actor: str,
    method: str,
    path: str,
    body: bytes,
    work: Callable[[], dict[str, Any]],
) -> dict[str, Any]:
    """Do `work` once per (key, actor); replay its answer for a retry of the same request."""
    if key is None:
        return work()
    if not key or len(key) > MAX_KEY:
        raise BadRequest(f"{HEADER} must be 1 to {MAX_KEY} characters")
    request_hash = hashlib.sha256(method.encode() + path.encode() + b"\0" + body).hexdigest()
    stored = db.scalars(
        select(IdempotencyKey).where(IdempotencyKey.key == key, IdempotencyKey.actor == actor)
    ).first()
    if stored is not None:
        if stored.request_hash != request_hash:
            raise Conflict(f"{HEADER} {key!r} was already used for a different request")
        return stored.response
    answer = work()
    db.add(
        IdempotencyKey(
            key=key,
            actor=actor,
            method=method,
            path=path,
            request_hash=request_hash,
            status_code=200,
            response=answer,
        )
    )
    db.flush()
    return answer
