"""What specgate reads from a client's request: the evaluator-inputs body field and the
segment rules. Shared by the gateway and the workload, so neither imports the other."""
