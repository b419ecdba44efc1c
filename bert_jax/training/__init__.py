"""Training under every entry point: the train state and step (train_core), optimizers, the
device mesh and shardings, train checkpoints and how a run starts, workdir ownership, and the
config sections the configs/ files share."""
