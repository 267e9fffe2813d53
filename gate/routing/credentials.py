"""Route credentials: a header whose value comes from an environment variable or a mounted
secret file, read when routing state loads. Only the reference (`env:NAME`, `file:PATH`) is
stored; the value is never written to the database, the API, spans or logs."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any

from gate.errors import GateError

log = logging.getLogger(__name__)

SOURCE_PATTERN = r"^(env:[A-Za-z_][A-Za-z0-9_]{0,127}|file:/\S{1,500})$"
HEADER_PATTERN = r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$"
DEFAULT_HEADER = "Authorization"
_SOURCE = re.compile(SOURCE_PATTERN)


class CredentialError(GateError):
    """A route's credential could not be read (the message never holds the value)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, status_code=502)


def parse_source(source: str) -> str:
    """Return a credential source if it is `env:NAME` or `file:/absolute/path`."""
    if not _SOURCE.match(source):
        raise ValueError("a credential source is env:NAME or file:/absolute/path")
    return source


def read_secret(source: str) -> str:
    """Read the secret a source points to (surrounding whitespace, e.g. a file's final
    newline, removed)."""
    kind, _, name = source.partition(":")
    if kind == "env":
        value = os.environ.get(name)
        if value is None:
            raise CredentialError(f"the environment variable {name} is not set")
    else:
        try:
            value = Path(name).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise CredentialError(f"cannot read {name}: {type(exc).__name__}") from None
    value = value.strip()
    if not value:
        raise CredentialError(f"{source} is empty")
    return value


def auth_headers(auth: dict[str, Any] | None) -> dict[str, str]:
    """Return the header to send to a route: `Authorization: Bearer <secret>`, or the raw
    secret under any other header name."""
    if not auth:
        return {}
    header = str(auth.get("header") or DEFAULT_HEADER)
    secret = read_secret(str(auth["source"]))
    if header.lower() == "authorization":
        secret = f"Bearer {secret}"
    return {header: secret}


def route_headers(name: str, auth: dict[str, Any] | None) -> dict[str, str]:
    """Like `auth_headers`, but an unreadable credential is logged (never its value) and
    no header is sent: the route then refuses the call, which is recorded as its error."""
    try:
        return auth_headers(auth)
    except CredentialError as exc:
        log.warning("route.credential_unavailable route=%s reason=%r", name, exc.message)
        return {}


def describe(auth: dict[str, Any] | None) -> str:
    """Return how a route authenticates, for listings: the header and the source only."""
    if not auth:
        return "-"
    return f"{auth.get('header') or DEFAULT_HEADER} from {auth['source']}"
