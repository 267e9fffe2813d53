"""Storage: engine and session factories, typed models."""
