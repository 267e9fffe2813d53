"""The control API: rollouts, kill switch, keys, audit, verdicts, browsing, feedback."""
