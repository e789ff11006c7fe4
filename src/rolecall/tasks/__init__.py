"""Tasks: where problems come from (built-in procedural tasks, later local datasets)."""
from rolecall.tasks.arithmetic import ArithmeticTask

__all__ = ["ArithmeticTask"]
