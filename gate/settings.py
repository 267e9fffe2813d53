"""Process settings: one `Settings` per process, built by factories, never at import."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_HOME = Path(".specgate")


class Settings(BaseSettings):
    """Everything a specgate process is configured with (`SPECGATE_*` variables)."""

    model_config = SettingsConfigDict(env_prefix="SPECGATE_", env_file=None, extra="ignore")

    home: Path = Field(DEFAULT_HOME, description="Folder for the embedded store, spool, reports.")
    database_url: str = Field(
        "", description="SQLAlchemy URL; empty means a SQLite file under `home`."
    )
    redis_url: str | None = Field(
        None, description="Redis URL; absent means in-process workers and no pub/sub."
    )
    otlp_endpoint: str | None = Field(
        None, description="OTLP/HTTP traces endpoint; absent means the embedded in-process sink."
    )
    secret_key: SecretStr = Field(
        SecretStr("specgate-dev-secret"), description="Server secret for API key HMACs."
    )
    log_level: str = "INFO"
    log_format: Literal["text", "json"] = Field(
        "text", description="Log lines as `key=value` text or one JSON object per line."
    )

    # Content capture: prompts and outputs are kept only for sampled pairs and bounded.
    capture_content: bool = True
    # Sampled parity: ask both routes for token log-probabilities on sampled pairs'
    # non-streamed calls (stripped again when the client did not ask for them).
    ask_logprobs: bool = False
    capture_max_chars: int = Field(8192, ge=0)
    # What evaluators read (request body, declared inputs, output) is kept up to this larger
    # limit; an input still cut makes its evaluations "not evaluable (truncated)".
    eval_input_max_chars: int = Field(262_144, ge=0)
    request_body_max_bytes: int = Field(1_048_576, gt=0)
    # The control API's bodies (routes, rollouts, policies, feedback) are small.
    control_body_max_bytes: int = Field(262_144, gt=0)
    # A retry with the same Idempotency-Key replays the first answer for this long.
    idempotency_key_max_age_s: float = Field(86_400.0, gt=0)

    # Gateway limits.
    gateway_workers: int = Field(1, ge=1)
    upstream_timeout_s: float = Field(120.0, gt=0)
    upstream_connect_timeout_s: float = Field(5.0, gt=0)
    mirror_max_concurrency: int = Field(64, ge=1)
    mirror_max_queue: int = Field(256, ge=0)
    mirror_deadline_s: float = Field(120.0, gt=0)
    control_rate: float = Field(0.05, ge=0.0, le=1.0)
    state_poll_interval_s: float = Field(2.0, gt=0)
    state_stale_after_s: float = Field(30.0, gt=0)
    pair_deadline_s: float = Field(300.0, gt=0)
    canary_first_byte_timeout_s: float = Field(10.0, gt=0)
    # A route that refused a connection (or timed one out) is down this long, doubling
    # per failed probe up to the cap: a candidate down is skipped (dropped, not failed).
    route_down_backoff_s: float = Field(5.0, gt=0)
    route_down_backoff_max_s: float = Field(60.0, gt=0)
    # The only folder route credentials (`--auth file:...`) may be read from.
    route_secrets_dir: Path = Path("/var/run/secrets/specgate/routes")

    # Periodic work (Celery beat with Redis, a background thread in the embedded default).
    gate_interval_s: float = Field(60.0, gt=0)
    pair_sweep_interval_s: float = Field(30.0, gt=0)
    # Complete pairs still unevaluated this long after completing are enqueued again,
    # waiting twice as long before each next try, at most this many times.
    pair_requeue_after_s: float = Field(300.0, gt=0)
    pair_requeue_max: int = Field(5, ge=0)
    scrape_interval_s: float = Field(15.0, gt=0)
    purge_interval_s: float = Field(3600.0, gt=0)

    # Task-completion sandbox: the bubblewrap binary, and the uid a root worker drops
    # to before starting it (a worker that is not root keeps its own).
    sandbox_bwrap: str = Field("bwrap", description="bubblewrap binary (name on PATH or path).")
    sandbox_uid: int = Field(65534, gt=0, description="Unprivileged uid for sandboxes.")
    sandbox_memory_total_mb: int = Field(
        2048, ge=64, description="Address space one sandbox's processes may hold together (MiB)."
    )

    @field_validator("database_url")
    @classmethod
    def _strip(cls, value: str) -> str:
        return value.strip()

    def resolved_database_url(self) -> str:
        """Return the database URL, defaulting to the embedded SQLite file."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.home / 'specgate.db').as_posix()}"

    @property
    def embedded(self) -> bool:
        """Whether this process runs the embedded default (SQLite, in-process workers)."""
        return self.resolved_database_url().startswith("sqlite")


def load_settings(**overrides: object) -> Settings:
    """Build settings from the environment, with explicit overrides on top."""
    return Settings(**overrides)  # type: ignore[arg-type]
