"""Scoped API keys: shown once, stored as an HMAC, compared in constant time, revocable."""
