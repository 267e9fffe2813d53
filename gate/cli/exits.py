"""How the CLI fails: one line on stderr and an exit code per kind of failure.

Codes follow sysexits.h where one fits, so scripts can tell a database outage (retry)
from bad input (fix the call). `gate check` keeps its own documented codes.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import NoReturn

import typer

# Typer vendors click; its usage errors (bad or out-of-range options) are not re-exported.
from typer._click.exceptions import NoArgsIsHelpError, UsageError

from gate.errors import (
    DatabaseUnavailable,
    GateError,
    InputMalformed,
    InputMissing,
    InvalidPolicy,
    SchemaMissing,
)

FAILURE = 1  # any other error the user can act on
USAGE = 2  # a bad or out-of-range option (click's own code)
DATA_ERROR = 65  # an input file in the wrong format (JSON, YAML, a field, a policy)
NO_INPUT = 66  # an input file missing or unreadable
SOFTWARE = 70  # a bug: reported in one line, never a traceback
UNAVAILABLE = 69  # the database cannot be reached
NO_SCHEMA = 78  # the database has no schema, or an old one: run `specgate db upgrade`
INTERRUPTED = 130
# `specgate rehearse`: the candidate's sampled tokens are proven not to be the target's
# (beside its own 0 pays, 1 does not pay, 2 could not tell, 4 error).
NOT_EXACT = 3

_CODES: tuple[tuple[type[GateError], int], ...] = (
    (DatabaseUnavailable, UNAVAILABLE),
    (SchemaMissing, NO_SCHEMA),
    (InputMissing, NO_INPUT),
    (InputMalformed, DATA_ERROR),
    (InvalidPolicy, DATA_ERROR),
)


def exit_code(exc: GateError) -> int:
    """Return the exit code of a user-facing error."""
    return next((code for kind, code in _CODES if isinstance(exc, kind)), FAILURE)


def one_line(text: str) -> str:
    """Fold a message onto one line."""
    return " ".join(text.split())


def run_cli(command: Callable[..., object], name: str = "specgate") -> NoReturn:
    """Run a click command; every failure is one line on stderr and its exit code."""
    try:
        result = command(standalone_mode=False)
    except NoArgsIsHelpError as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except UsageError as exc:
        _fail(name, exc.format_message(), USAGE)
    except typer.Abort:
        _fail(name, "interrupted", INTERRUPTED)
    except GateError as exc:
        _fail(name, exc.message, exit_code(exc))
    except Exception as exc:  # a bug still gets one line and a code of its own
        _fail(name, f"internal error ({type(exc).__name__}: {exc})", SOFTWARE)
    sys.exit(result if isinstance(result, int) else 0)


def _fail(name: str, message: str, code: int) -> NoReturn:
    print(f"{name}: error: {one_line(message)}", file=sys.stderr)
    sys.exit(code)
