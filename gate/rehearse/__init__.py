"""`specgate rehearse`: replay a workload against two routes over a sweep of concurrency."""
