from tests.bridge.slurm_cluster import slurm, slurm_cluster  # noqa: F401 (fixtures)
