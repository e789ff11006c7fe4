"""Running rolecall beyond one process: rollout workers on Ray."""
