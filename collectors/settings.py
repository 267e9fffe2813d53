"""Collector settings (`SPECGATE_*` variables), kept here until they move into `gate.settings`."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class CollectorSettings(BaseSettings):
    """Bounds of the span pipeline, receiver limits, retention ages and scrape timeouts."""

    model_config = SettingsConfigDict(env_prefix="SPECGATE_", env_file=None, extra="ignore")

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
    retention_content_days: float = Field(7.0, gt=0)
    retention_spans_days: float = Field(14.0, gt=0)
    retention_batch_rows: int = Field(5_000, ge=1)
    # Engine /metrics scraping.
    scrape_timeout_s: float = Field(5.0, gt=0)

    def spool_dir(self, home: Path) -> Path:
        """Return the spool folder: the configured one, else `<home>/spool`."""
        return self.collector_spool_dir or home / "spool"


def load_collector_settings(**overrides: object) -> CollectorSettings:
    """Build collector settings from the environment, with explicit overrides on top."""
    return CollectorSettings(**overrides)  # type: ignore[arg-type]
