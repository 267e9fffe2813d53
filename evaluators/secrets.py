"""What a worker must never store: its configured secrets, and how to scrub them out."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from collections.abc import Iterable
from urllib.parse import unquote, urlsplit

from gate.settings import Settings

log = logging.getLogger("specgate.worker")

REDACTED = "[redacted]"
# Shorter values would redact ordinary text; no real secret is this short.
_MIN_SECRET = 4
_PR_SET_DUMPABLE = 4
_PR_GET_DUMPABLE = 3


def configured_secrets(settings: Settings) -> tuple[str, ...]:
    """Return the secret values a process holds: the key and the URLs' passwords."""
    values = [settings.secret_key.get_secret_value()]
    for url in (settings.database_url, settings.redis_url or ""):
        password = urlsplit(url).password if "://" in url else None
        if password:
            values += [password, unquote(password), url]
    return tuple(v for v in dict.fromkeys(values) if len(v) >= _MIN_SECRET)


def scrub(text: str, secrets: Iterable[str]) -> str:
    """Return `text` with every occurrence of each secret replaced."""
    # Longest first, so a URL goes before the password inside it.
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= _MIN_SECRET:
            text = text.replace(secret, REDACTED)
    return text


def _prctl(option: int, value: int = 0) -> int:
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    result: int = libc.prctl(option, value, 0, 0, 0)
    return result


def make_non_dumpable() -> bool:
    """Mark this process (and the children it forks) non-dumpable; return whether it took.

    A non-dumpable process's memory, environ and /proc files are closed to processes of
    its own uid, so an escape from a same-uid child still cannot read the worker's secrets.
    """
    if _prctl(_PR_SET_DUMPABLE, 0) != 0:
        log.error("worker_dumpable reason=prctl_failed")
        return False
    return dumpable() is False


def dumpable() -> bool:
    """Return whether this process is dumpable."""
    return _prctl(_PR_GET_DUMPABLE) != 0
