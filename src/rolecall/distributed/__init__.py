"""Running rolecall beyond one process: the data-parallel process group of a torchrun launch, and rollout actors on Ray."""
