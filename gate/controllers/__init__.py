"""Kubernetes progressive-delivery controllers: Argo Rollouts analysis and Flagger webhooks."""
