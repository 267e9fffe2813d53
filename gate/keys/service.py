"""API key life cycle and verification.

A key reads `sg_<prefix>_<secret>`. The prefix finds the row; the secret is stored only
as HMAC-SHA256 under the server secret (`SPECGATE_SECRET_KEY`), so a leaked database
does not yield usable keys, and is compared with `hmac.compare_digest`.
Scopes nest: `admin` includes `operate`, which includes `read`.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from sqlalchemy import select
from sqlalchemy.orm import Session

from gate import audit
from gate.db.base import utcnow
from gate.db.models import ApiKey
from gate.errors import BadRequest, Conflict, NotFound

TOKEN_PREFIX = "sg"


class Scope(StrEnum):
    READ = "read"
    OPERATE = "operate"
    ADMIN = "admin"


_RANK = {Scope.READ: 0, Scope.OPERATE: 1, Scope.ADMIN: 2}


@dataclass(frozen=True)
class Principal:
    """Who is calling: the key's name and the scopes it holds."""

    name: str
    scopes: frozenset[Scope]

    @property
    def actor(self) -> str:
        """Return the audit actor string for this key."""
        return audit.key_actor(self.name)

    def allows(self, needed: Scope) -> bool:
        """Whether this key may do what `needed` guards."""
        return any(_RANK[held] >= _RANK[needed] for held in self.scopes)


def parse_scopes(values: Sequence[str]) -> frozenset[Scope]:
    """Validate scope names."""
    try:
        scopes = frozenset(Scope(v.strip()) for v in values if v.strip())
    except ValueError:
        raise BadRequest(f"scopes must be among {', '.join(s.value for s in Scope)}") from None
    if not scopes:
        raise BadRequest("a key needs at least one scope")
    return scopes


def digest(secret_key: str, secret: str) -> str:
    """Return the stored form of a secret (an API key's, a hook token): its HMAC-SHA256."""
    return hmac.new(secret_key.encode(), secret.encode(), hashlib.sha256).hexdigest()


def create_key(
    session: Session, *, name: str, scopes: Sequence[str], secret_key: str, actor: str
) -> tuple[ApiKey, str]:
    """Create a key; return the row and the token, which is never shown again."""
    if session.scalars(select(ApiKey).where(ApiKey.name == name)).first() is not None:
        raise Conflict(f"a key named {name!r} already exists")
    prefix, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
    row = ApiKey(
        name=name,
        prefix=prefix,
        secret_hash=digest(secret_key, secret),
        scopes=sorted(s.value for s in parse_scopes(scopes)),
    )
    session.add(row)
    session.flush()
    audit.record(session, actor=actor, action="key.create", details={"key": name})
    return row, f"{TOKEN_PREFIX}_{prefix}_{secret}"


def revoke_key(session: Session, *, name: str, actor: str) -> ApiKey:
    """Revoke a key by name; revoking twice is harmless."""
    row = session.scalars(select(ApiKey).where(ApiKey.name == name)).first()
    if row is None:
        raise NotFound(f"no key named {name!r}")
    if row.revoked_at is None:
        row.revoked_at = utcnow()
        audit.record(session, actor=actor, action="key.revoke", details={"key": name})
    return row


def authenticate(session: Session, *, token: str, secret_key: str) -> Principal | None:
    """Return the principal for a token, or None when it is malformed, unknown or revoked."""
    parts = token.split("_", 2)
    if len(parts) != 3 or parts[0] != TOKEN_PREFIX:
        return None
    row = session.scalars(select(ApiKey).where(ApiKey.prefix == parts[1])).first()
    # Compare even when the row is missing, so timing does not reveal valid prefixes.
    expected = row.secret_hash if row is not None else digest(secret_key, "absent")
    if not hmac.compare_digest(expected, digest(secret_key, parts[2])):
        return None
    if row is None or row.revoked_at is not None:
        return None
    return Principal(row.name, frozenset(Scope(s) for s in row.scopes))
