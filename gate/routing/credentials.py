"""Route credentials: a header whose value comes from an environment variable or a mounted
secret file, read when routing state loads. Only the reference (`env:NAME`, `file:PATH`) is
stored; the value is never written to the database, the API, spans or logs.

Whoever registers a route chooses where its token is sent, so a reference may only name a
variable meant for routes (`SPECGATE_ROUTE_*`) or a file in the route secrets folder: never
the process's own secrets (database URL, API-key HMAC) or any other file."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from gate.errors import GateError

log = logging.getLogger(__name__)

ENV_PREFIX = "SPECGATE_ROUTE_"
DEFAULT_SECRETS_DIR = Path("/var/run/secrets/specgate/routes")
SOURCE_PATTERN = rf"^(env:{ENV_PREFIX}[A-Za-z0-9_]{{1,100}}|file:/\S{{1,500}})$"
HEADER_PATTERN = r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$"
DEFAULT_HEADER = "Authorization"
# Headers the gateway writes itself (framing, body type, trace context): a credential sent
# under one of these would corrupt the request or be silently overwritten.
RESERVED_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "upgrade",
        "te",
        "trailer",
        "expect",
        "content-type",
        "content-encoding",
        "traceparent",
        "tracestate",
        "baggage",
    }
)


class CredentialError(GateError):
    """A route's credential could not be read (the message never holds the value)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, status_code=502)


def read_secret(source: str, secrets_dir: Path = DEFAULT_SECRETS_DIR) -> str:
    """Read the secret a source points to (surrounding whitespace, e.g. a file's final
    newline, removed); only `SPECGATE_ROUTE_*` variables and files in `secrets_dir`."""
    kind, _, name = source.partition(":")
    if kind == "env":
        if not name.startswith(ENV_PREFIX):
            raise CredentialError(f"{name} is not a route credential (they start {ENV_PREFIX})")
        value = os.environ.get(name)
        if value is None:
            raise CredentialError(f"the environment variable {name} is not set")
    else:
        path = Path(name).resolve()
        if not path.is_relative_to(secrets_dir.resolve()):
            raise CredentialError(f"{name} is outside the route secrets folder {secrets_dir}")
        try:
            value = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise CredentialError(f"cannot read {name}: {type(exc).__name__}") from None
    value = value.strip()
    if not value:
        raise CredentialError(f"{source} is empty")
    return value


def check_header(name: str) -> str:
    """Return `name` if a credential may be sent under it; raise ValueError otherwise."""
    if name.lower() in RESERVED_HEADERS:
        raise ValueError(f"{name} is a header the gateway sets itself; pick another")
    return name


def auth_headers(
    auth: dict[str, Any] | None, secrets_dir: Path = DEFAULT_SECRETS_DIR
) -> dict[str, str]:
    """Return the header to send to a route: `Authorization: Bearer <secret>`, or the raw
    secret under any other header name."""
    if not auth:
        return {}
    header = str(auth.get("header") or DEFAULT_HEADER)
    if header.lower() in RESERVED_HEADERS:  # stored before registration refused it
        raise CredentialError(f"the credential header {header} is one the gateway sets itself")
    secret = read_secret(str(auth["source"]), secrets_dir)
    if header.lower() == "authorization":
        secret = f"Bearer {secret}"
    return {header: secret}


def route_headers(
    name: str, auth: dict[str, Any] | None, secrets_dir: Path = DEFAULT_SECRETS_DIR
) -> dict[str, str]:
    """Like `auth_headers`, but an unreadable credential is logged (never its value) and
    no header is sent: the route then refuses the call, which is recorded as its error."""
    try:
        return auth_headers(auth, secrets_dir)
    except CredentialError as exc:
        log.warning("route.credential_unavailable route=%s reason=%r", name, exc.message)
        return {}


def describe(auth: dict[str, Any] | None) -> str:
    """Return how a route authenticates, for listings: the header and the source only."""
    if not auth:
        return "-"
    return f"{auth.get('header') or DEFAULT_HEADER} from {auth['source']}"
