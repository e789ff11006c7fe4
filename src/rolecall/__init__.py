"""rolecall: train multi-agent LLM workflows with reinforcement learning, role by role."""
__version__ = "0.1.0"
