"""The nemesis (issue 19): replicas behind a real balancer on one Redis, clients of every
kind, a seeded schedule of faults, and a checker of what every client was told."""
