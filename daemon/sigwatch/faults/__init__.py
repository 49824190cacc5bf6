"""Node faults: policy decisions, a persisted lifecycle, Slurm drain and resume, the verdict."""
