"""The deployment's identity, which namespaces its routing messages."""

from __future__ import annotations

import threading

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from gate.db.models import Deployment
from gate.errors import ConfigError
from gate.routing.pubsub import Publisher, RedisPublisher
from gate.settings import Settings


def read_deployment(session: Session) -> str:
    """Return the id the migrations stored; a database without it needs `db upgrade`."""
    found = session.scalars(select(Deployment.id).order_by(Deployment.created_at)).first()
    if found is None:
        raise ConfigError("the database has no deployment row: run `specgate db upgrade`")
    return found


class DeploymentId:
    """The deployment id, read from the database on first use and then kept."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._sessions = sessions
        self._value: str | None = None
        self._lock = threading.Lock()

    def __call__(self) -> str:
        """Return the id; raise while the database cannot be read (callers retry)."""
        with self._lock:
            if self._value is None:
                with self._sessions() as session:
                    self._value = read_deployment(session)
            return self._value


def publisher(settings: Settings, db: Session | sessionmaker[Session]) -> Publisher | None:
    """Publish routing changes on Redis when configured (gateways also poll the DB)."""
    if not settings.redis_url:
        return None
    # The identity is read on a session of its own: publishing runs inside `db`'s commit.
    sessions = sessionmaker(db.get_bind()) if isinstance(db, Session) else db
    return RedisPublisher(settings.redis_url, deployment=DeploymentId(sessions))
