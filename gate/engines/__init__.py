"""Local engines behind an OpenAI-compatible API: real models on CPU, and a synthetic one."""
