"""Everything saved: the bundle format, checkpoint folders, loading, a run's checkpoints,
checksums, and who owns a workdir."""
