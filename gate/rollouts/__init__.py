"""Routes and rollouts: the rollout state machine and what each state means for routing."""
