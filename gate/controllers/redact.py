"""Keep hook tokens out of logs and stored text: they travel in the URL path (Flagger has
no headers), and a controller's error messages quote that URL back (Go's url.Error)."""

from __future__ import annotations

import logging
import re

PREFIX = "/v1/hooks/flagger/"
HOOK_PATH = re.compile(re.escape(PREFIX) + r"([^\s?\"]*)")
# A token quoted without its path (URL-escaped, cut, or pasted into a message).
TOKEN = re.compile(r"sgh_[A-Za-z0-9_\-]+")
HOOKS = frozenset(
    {
        "confirm-rollout",
        "pre-rollout",
        "rollout",
        "confirm-traffic-increase",
        "confirm-promotion",
        "post-rollout",
        "rollback",
        "event",
    }
)


def _mask(match: re.Match[str]) -> str:
    # Keep a known hook name; everything else after the prefix may be a token (a URL wired
    # wrongly can carry it in any segment).
    hook, slash, _ = match.group(1).partition("/")
    return PREFIX + (f"{hook}/***" if hook in HOOKS and slash else "***")


def redact(text: str) -> str:
    """Replace every hook token in `text`."""
    return TOKEN.sub("sgh_***", HOOK_PATH.sub(_mask, text))


class RedactTokens(logging.Filter):
    """Rewrites a record's message and arguments before any handler formats them."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(redact(a) if isinstance(a, str) else a for a in record.args)
        return True


def install(logger_names: tuple[str, ...] = ("uvicorn.access", "uvicorn.error")) -> None:
    """Add the filter to the servers' loggers once."""
    for name in logger_names:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactTokens) for f in logger.filters):
            logger.addFilter(RedactTokens())
