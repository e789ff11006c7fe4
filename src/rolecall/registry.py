"""How rolecall finds its tasks, verifiers, workflows, estimators and trainers: in a package.

Each kind lives in its own package (`tasks/`, `rewards/verifiers/`, `workflows/`,
`advantages/`, `train/trainers/`), one file per entry, and declares itself in that file.
`discover` imports every module of the package once and collects what the predicate picks,
so adding one is adding one file: no table, no dispatch chain elsewhere.
"""
from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from types import ModuleType
from typing import Any


def discover(package: str, pick: Callable[[ModuleType], list[Any]]) -> list[Any]:
    """`pick(module)` over every module directly in `package` (sorted by name, subpackages
    included), concatenated. A module that fails to import fails the lookup, naming itself."""
    pkg = importlib.import_module(package)
    found: list[Any] = []
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        found += pick(importlib.import_module(f"{package}.{info.name}"))
    return found


def declared(name: str, kind: type) -> Callable[[ModuleType], list[Any]]:
    """A `pick` for modules that declare one entry as a module-level constant (`TASK = TaskSource(...)`)."""
    def pick(module: ModuleType) -> list[Any]:
        value = getattr(module, name, None)
        return [value] if isinstance(value, kind) else []
    return pick


def defined(base: type) -> Callable[[ModuleType], list[type]]:
    """A `pick` for the subclasses of `base` a module defines itself (not those it imports)
    that carry a non-empty `name`."""
    def pick(module: ModuleType) -> list[type]:
        return [obj for obj in vars(module).values()
                if isinstance(obj, type) and issubclass(obj, base) and obj is not base
                and obj.__module__ == module.__name__ and isinstance(getattr(obj, "name", None), str) and obj.name]
    return pick
