"""Quality evaluators that score both cohorts of a rollout."""
