"""The training loop and its stages: rollout, score, advantage, update, log, checkpoint."""
