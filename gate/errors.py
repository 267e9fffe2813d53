"""The exception tree: every error a user can see derives from `GateError`."""

from __future__ import annotations


class GateError(Exception):
    """An error with a message fit for users and the HTTP status it maps to."""

    status_code: int = 500
    code: str = "internal_error"

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if status_code is not None:
            self.status_code = status_code


class BadRequest(GateError):
    status_code = 400
    code = "invalid_request"


class InvalidPolicy(BadRequest):
    """A gate policy out of range or malformed."""

    status_code = 422
    code = "invalid_policy"


class InputMissing(BadRequest):
    """An input file named on the command line is missing or unreadable."""

    code = "input_missing"


class InputMalformed(BadRequest):
    """An input file is not in the format it should be (bad JSON, YAML or field)."""

    code = "input_malformed"


class Unauthorized(GateError):
    status_code = 401
    code = "unauthorized"


class Forbidden(GateError):
    status_code = 403
    code = "forbidden"


class NotFound(GateError):
    status_code = 404
    code = "not_found"


class Conflict(GateError):
    status_code = 409
    code = "conflict"


class InvalidTransition(Conflict):
    """A rollout was asked to move to a state its current state cannot reach."""

    code = "invalid_transition"


class StaleVersion(Conflict):
    """An update named a rollout version that is no longer current."""

    code = "stale_version"


class ConfigError(GateError):
    """The process is misconfigured (bad URL, missing model, bad policy)."""

    status_code = 500
    code = "config_error"


class SchemaMissing(ConfigError):
    """The database has no schema, or an older one: `specgate db upgrade` fixes it."""

    code = "schema_missing"


class NotCommitted(GateError):
    """The endpoint's work was done but its commit failed: nothing was applied or published."""

    status_code = 503
    code = "not_committed"


class DatabaseUnavailable(GateError):
    """The database cannot be reached or rejected the connection."""

    status_code = 503
    code = "database_unavailable"
