"""Telemetry the gateway emits: span names and attributes (the collectors' input contract)."""
