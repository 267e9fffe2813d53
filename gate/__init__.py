"""specgate: rollout gate and observability for LLM speculative decoding."""

__version__ = "0.1.0"
