"""Request dependencies: the session (which owns commit/rollback) and scoped auth."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from gate.db.engine import db_reason
from gate.errors import Forbidden, NotCommitted, Unauthorized
from gate.keys.service import Principal, Scope, authenticate
from gate.routing.health import RouteHealth
from gate.routing.pubsub import Publisher
from gate.routing.sync import RoutingState
from gate.settings import Settings


@dataclass(frozen=True)
class Services:
    """What control endpoints need, built once per process."""

    settings: Settings
    sessions: sessionmaker[Session]
    publisher: Publisher | None
    # The gateway's routing state, when the control API runs inside a gateway.
    routing: RoutingState | None = None
    # Its routes' down state (connections refused), shown by /healthz.
    health: RouteHealth | None = None


def services(request: Request) -> Services:
    """Return the process's services."""
    found: Services = request.app.state.services
    return found


def session(request: Request) -> Iterator[Session]:
    """Open a session; commit when the endpoint succeeds, roll back when it raises."""
    with services(request).sessions() as db:
        transaction = db.begin()
        try:
            yield db
        except BaseException:
            transaction.rollback()
            raise
        try:
            transaction.commit()
        except SQLAlchemyError as exc:
            raise NotCommitted(
                f"the change was not committed ({db_reason(exc)}); read the state back before"
                " retrying"
            ) from exc


# scope="function": the commit runs when the endpoint returns, before the response is
# sent, so a 2xx is a committed change and a failed commit is an error answer.
SessionDep = Annotated[Session, Depends(session, scope="function")]
ServicesDep = Annotated[Services, Depends(services)]


# Declares the bearer scheme in the OpenAPI; `check` reads the header itself, so every
# refusal is the same problem document with WWW-Authenticate.
BearerDep = Annotated[
    HTTPAuthorizationCredentials | None,
    Security(HTTPBearer(auto_error=False, description="An API key: `specgate keys create`.")),
]


def require(scope: Scope) -> Callable[..., Principal]:
    """Return a dependency that admits keys holding `scope` (or a higher one)."""

    def check(request: Request, db: SessionDep, _: BearerDep) -> Principal:
        header = request.headers.get("authorization", "")
        scheme, _sep, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthorized("send an API key as 'Authorization: Bearer <key>'")
        secret = services(request).settings.secret_key.get_secret_value()
        principal = authenticate(db, token=token.strip(), secret_key=secret)
        if principal is None:
            raise Unauthorized("the API key is unknown, malformed or revoked")
        if not principal.allows(scope):
            raise Forbidden(f"this key lacks the '{scope.value}' scope")
        return principal

    return check


Reader = Annotated[Principal, Depends(require(Scope.READ))]
Operator = Annotated[Principal, Depends(require(Scope.OPERATE))]
Admin = Annotated[Principal, Depends(require(Scope.ADMIN))]
