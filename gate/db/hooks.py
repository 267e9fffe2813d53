"""Run work after a transaction commits (publishing, enqueuing), never on rollback."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import event
from sqlalchemy.orm import Session


def after_commit(session: Session, work: Callable[[], None]) -> None:
    """Call `work` once the session's current transaction has committed."""

    def _run(_session: Session) -> None:
        work()

    event.listen(session, "after_commit", _run, once=True)
