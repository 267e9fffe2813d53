"""Pairs and generations, filtered, with cursor pagination (newest first)."""

from __future__ import annotations

import base64
import binascii
import uuid
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query
from sqlalchemy import Select, select

from gate.api.deps import Reader, SessionDep
from gate.api.schemas import GenerationOut, IsoTime, Page, PairOut
from gate.db.enums import Cohort, GenerationStatus, PairState
from gate.db.models import Generation, Pair
from gate.errors import BadRequest

router = APIRouter(prefix="/v1", tags=["browse"])
Limit = Annotated[int, Query(ge=1, le=500)]
OptionalId = Annotated[int | None, Query(ge=1, le=2**31 - 1)]


def _encode(value: str) -> str:
    return base64.urlsafe_b64encode(value.encode()).decode()


def _decode(cursor: str) -> str:
    try:
        return base64.urlsafe_b64decode(cursor.encode()).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise BadRequest("cursor is not one this API returned") from None


@router.get("/generations", response_model=Page[GenerationOut])
def generations(
    db: SessionDep,
    _: Reader,
    rollout_id: OptionalId = None,
    cohort: Cohort | None = None,
    status: GenerationStatus | None = None,
    segment: str | None = None,
    since: IsoTime | None = None,
    until: IsoTime | None = None,
    cursor: str | None = None,
    limit: Limit = 100,
) -> Page[GenerationOut]:
    """Route calls, newest first."""
    statement: Select[Generation] = select(Generation).order_by(Generation.id.desc())
    filters = {
        Generation.rollout_id: rollout_id,
        Generation.cohort: cohort,
        Generation.status: status,
        Generation.segment: segment,
    }
    for column, value in filters.items():
        if value is not None:
            statement = statement.where(column == value)
    if since is not None:
        statement = statement.where(Generation.started_at >= since)
    if until is not None:
        statement = statement.where(Generation.started_at < until)
    if cursor is not None:
        last = _decode(cursor)
        if not last.isdigit():
            raise BadRequest("cursor is not one this API returned")
        statement = statement.where(Generation.id < int(last))
    rows = list(db.scalars(statement.limit(limit + 1)))
    more = len(rows) > limit
    items = [GenerationOut.model_validate(r) for r in rows[:limit]]
    return Page(items=items, next_cursor=_encode(str(items[-1].id)) if more else None)


@router.get("/pairs", response_model=Page[PairOut])
def pairs(
    db: SessionDep,
    _: Reader,
    rollout_id: OptionalId = None,
    state: PairState | None = None,
    segment: str | None = None,
    is_control: bool | None = None,
    cursor: str | None = None,
    limit: Limit = 100,
) -> Page[PairOut]:
    """Pairs, newest first."""
    statement: Select[Pair] = select(Pair).order_by(Pair.created_at.desc(), Pair.id.desc())
    filters = {
        Pair.rollout_id: rollout_id,
        Pair.state: state,
        Pair.segment: segment,
        Pair.is_control: is_control,
    }
    for column, value in filters.items():
        if value is not None:
            statement = statement.where(column == value)
    if cursor is not None:
        created, _sep, pair_id = _decode(cursor).partition("|")
        try:
            after, last_id = datetime.fromisoformat(created), uuid.UUID(pair_id)
        except ValueError:
            raise BadRequest("cursor is not one this API returned") from None
        statement = statement.where(
            (Pair.created_at < after) | ((Pair.created_at == after) & (Pair.id < last_id))
        )
    rows = list(db.scalars(statement.limit(limit + 1)))
    more = len(rows) > limit
    items = [PairOut.model_validate(r) for r in rows[:limit]]
    last = items[-1] if items else None
    token = _encode(f"{last.created_at.isoformat()}|{last.id}") if more and last else None
    return Page(items=items, next_cursor=token)
