"""Alembic environment and hand-reviewed versions (Postgres and SQLite)."""
