"""Request fields of specgate's own, beside OpenAI's."""

from __future__ import annotations

# The body field a client declares evaluator inputs in; stripped before any upstream call.
BODY_FIELD = "specgate"
