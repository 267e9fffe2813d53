"""Process settings: one `Settings` per process, built by factories, never at import."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_HOME = Path(".specgate")


class GatewaySettings(BaseModel):
    """The gateway's section: upstream timeouts, mirroring bounds, routing-state freshness."""

    gateway_workers: int = Field(1, ge=1)
    upstream_timeout_s: float = Field(120.0, gt=0)
    upstream_connect_timeout_s: float = Field(5.0, gt=0)
    # The HTTP client of route calls (gate/gateway/transport.py): the lean HTTP/1.1 client,
    # or httpx.
    upstream_transport: Literal["http1", "httpx"] = "http1"
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


class CollectorSettings(BaseModel):
    """The collectors' section: span pipeline bounds, receiver limits, retention, scrapes."""

    # Queue and batch writer.
    collector_queue_max_spans: int = Field(100_000, ge=1)
    collector_batch_max_spans: int = Field(5_000, ge=1)
    collector_flush_interval_s: float = Field(0.2, gt=0)
    collector_shutdown_timeout_s: float = Field(30.0, gt=0)
    collector_writer_threads: int = Field(2, ge=1, le=8)
    # Worker processes of `specgate collect` (each with its queue, writer and spool folder).
    collector_workers: int = Field(1, ge=1, le=64)
    # Spool used while the database is unreachable; empty means `<home>/spool`.
    collector_spool_dir: Path | None = None
    collector_spool_max_bytes: int = Field(256 * 1024 * 1024, ge=0)
    collector_retry_initial_s: float = Field(0.5, gt=0)
    collector_retry_max_s: float = Field(10.0, gt=0)
    # OTLP/HTTP receiver.
    collector_max_body_bytes: int = Field(8 * 1024 * 1024, gt=0)
    collector_token: SecretStr | None = None
    # "durable": an OTLP success is sent once the spans are committed or fsynced into the
    # spool. "received" (the old behaviour, kept to measure against): success on receipt,
    # so spans still queued in memory are lost if the process dies.
    collector_acknowledge: Literal["durable", "received"] = "durable"
    # How long a request waits for its spans to be durable before a 503 (retry; re-sent
    # spans are stored once), and the Retry-After of every 503.
    collector_ack_timeout_s: float = Field(5.0, gt=0)
    collector_retry_after_s: int = Field(5, ge=1)
    # Retention: captured content goes sooner than raw spans; generations' numbers stay.
    # Engine samples feed the crossover and load stamp (minutes to hours back) and the
    # dashboards' engine panels (a dashboard's range).
    retention_content_days: float = Field(7.0, gt=0)
    retention_spans_days: float = Field(14.0, gt=0)
    retention_samples_days: float = Field(14.0, gt=0)
    # Pairs go only where `pairs` is partitioned, by whole partitions, and never one holding
    # a pair of a rollout not yet ended (`collectors.retention`).
    retention_pairs_days: float = Field(90.0, gt=0)
    retention_batch_rows: int = Field(5_000, ge=1)
    # Engine /metrics scraping.
    scrape_timeout_s: float = Field(5.0, gt=0)

    def spool_dir(self, home: Path) -> Path:
        """Return the spool folder: the configured one, else `<home>/spool`."""
        return self.collector_spool_dir or home / "spool"


class GateSettings(BaseModel):
    """The gate's section: periodic work (Celery beat with Redis, else a background thread)."""

    gate_interval_s: float = Field(60.0, gt=0)
    pair_sweep_interval_s: float = Field(30.0, gt=0)
    # Complete pairs still unevaluated this long after completing are enqueued again,
    # waiting twice as long before each next try, at most this many times.
    pair_requeue_after_s: float = Field(300.0, gt=0)
    pair_requeue_max: int = Field(5, ge=0)
    scrape_interval_s: float = Field(15.0, gt=0)
    purge_interval_s: float = Field(3600.0, gt=0)
    # Creating time partitions ahead (`gate.db.partitions`; Postgres tables converted by
    # `specgate db partition`): well under the shortest period (an hour).
    partition_interval_s: float = Field(600.0, gt=0)
    # Traffic links (k8s-traffic): how often their objects are brought to the rollout's state
    # (a kill reaches them within it); the API server from this kubeconfig, else the pod's
    # service account; how long a write may wait for its status conditions in one pass.
    traffic_interval_s: float = Field(10.0, gt=0)
    kubeconfig: Path | None = None
    traffic_confirm_timeout_s: float = Field(10.0, ge=0)


class EvaluatorSettings(BaseModel):
    """The evaluators' section: the task-completion sandbox."""

    # Task-completion sandbox: the bubblewrap binary, and the uid a root worker drops
    # to before starting it (a worker that is not root keeps its own).
    sandbox_bwrap: str = Field("bwrap", description="bubblewrap binary (name on PATH or path).")
    sandbox_uid: int = Field(65534, gt=0, description="Unprivileged uid for sandboxes.")
    sandbox_memory_total_mb: int = Field(
        2048, ge=64, description="Address space one sandbox's processes may hold together (MiB)."
    )


class LogSettings(BaseSettings):
    """The logging section, also read on its own: `gate.logs` sets logging up before a
    command builds its `Settings`."""

    model_config = SettingsConfigDict(env_prefix="SPECGATE_", env_file=None, extra="ignore")

    log_level: str = "INFO"
    log_format: Literal["text", "json"] = Field(
        "text", description="Log lines as `key=value` text or one JSON object per line."
    )

    @field_validator("log_format", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value


class Settings(LogSettings, GatewaySettings, CollectorSettings, GateSettings, EvaluatorSettings):
    """Everything a specgate process is configured with (`SPECGATE_*` variables).

    One object per process, built once and passed down. The sections it derives from name
    what each package reads; the variable names are the fields' names, unchanged.
    """

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

    # Content capture: prompts and outputs are kept only for sampled pairs and bounded.
    capture_content: bool = True
    # Sampled parity and per-token exactness: ask a sampled pair's calls (temperature > 0)
    # for token log-probabilities (and alternatives), stripped again from the client's
    # answer when it did not ask. `auto` asks where the rollout's policy tests parity
    # (`guardrails.output_parity`) or exactness (`guardrails.exactness`).
    ask_logprobs: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Ask sampled pairs' calls for logprobs: auto (the rollout's policy), on, off.",
    )
    capture_max_chars: int = Field(8192, ge=0)
    # What evaluators read (request body, declared inputs, output) is kept up to this larger
    # limit; an input still cut makes its evaluations "not evaluable (truncated)".
    eval_input_max_chars: int = Field(262_144, ge=0)
    request_body_max_bytes: int = Field(1_048_576, gt=0)
    # The control API's bodies (routes, rollouts, policies, feedback) are small.
    control_body_max_bytes: int = Field(262_144, gt=0)
    # A retry with the same Idempotency-Key replays the first answer for this long.
    idempotency_key_max_age_s: float = Field(86_400.0, gt=0)

    @field_validator("database_url")
    @classmethod
    def _strip(cls, value: str) -> str:
        return value.strip()

    @field_validator("ask_logprobs", mode="before")
    @classmethod
    def _word(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value

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
