"""Engines turn batches of chat requests into sampled completions (with log-probs)."""
from rolecall.engines.base import Engine, GenOutput, GenRequest

__all__ = ["Engine", "GenOutput", "GenRequest"]
