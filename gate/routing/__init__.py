"""Routing state: what the gateway does with each alias, held in memory and kept fresh.

The database is the source of truth. Changes are published on Redis (or an in-process
channel in the embedded default) and every gateway also polls the database; when its
state is older than the staleness bound the gateway serves baseline only.
"""
