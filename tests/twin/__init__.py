"""The digital twin's scenario world, on the harness (tests/harness): scenario files and their model, the
simulated HyperPod cluster and rate faults and incidents, the report, the local operator API, and its runner
(`python -m tests.twin`, which `hpdhc simulate` calls from a checkout)."""
