"""Tasks: where problems come from (built-in procedural tasks, later local datasets)."""
from rolecall.tasks.arithmetic import ArithmeticTask
from rolecall.tasks.multihop import MultiHopTask

__all__ = ["ArithmeticTask", "MultiHopTask"]
