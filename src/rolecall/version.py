"""rolecall's version, in the lowest layer so that anything may say it (a model card, a run's sittings)."""
from __future__ import annotations

__version__ = "0.1.0"
