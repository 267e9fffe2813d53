"""Control API routers."""
