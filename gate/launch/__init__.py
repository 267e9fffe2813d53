"""Launching a route file's vLLM servers: the file's schema and flags, and the processes."""
