"""The collectors' section of `gate.settings.Settings`, under the name tests import."""

from __future__ import annotations

from gate.settings import CollectorSettings, Settings, load_settings

__all__ = ["CollectorSettings", "load_collector_settings"]


def load_collector_settings(**overrides: object) -> Settings:
    """Build the process settings (collector fields among them) with overrides on top."""
    return load_settings(**overrides)
