"""The OpenAI-compatible gateway: proxy, shadow mirror, canary with fallback, telemetry."""
