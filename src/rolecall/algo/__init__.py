"""The RL algorithm: rows from episodes, forward passes, the clipped update, optimizers and per-role statistics."""
