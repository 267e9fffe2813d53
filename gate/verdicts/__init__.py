"""Running the gate: verdicts stored, and acted on through the routing service."""
