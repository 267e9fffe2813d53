"""The Celery worker: the app, its tasks (evaluations and the periodic job table) and beat."""
