"""YAML as plain data, with one rule YAML itself lacks: a key given twice in a mapping is an error."""
from __future__ import annotations

from typing import Any

import yaml


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A mapping that names the same key twice (YAML would keep the last one silently)."""

    def __init__(self, key: Any, first: yaml.Mark, again: yaml.Mark) -> None:
        super().__init__(None, None, f"duplicate key {key!r} (first on line {first.line + 1})", again)
        self.key, self.line = key, again.line + 1


class _UniqueKeyLoader(yaml.SafeLoader):
    """safe_load's loader, refusing a key given twice in one mapping (`train:` twice, `steps:`
    twice under `train:`): the first value would be dropped without a word. Keys that a merge
    (`<<: *defaults`) brings in may be overridden, as YAML intends."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, yaml.Mark] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node.start_mark)
                except TypeError:  # an unhashable key: SafeLoader's own error names it
                    continue
                if first is not key_node.start_mark:
                    raise DuplicateKeyError(key, first, key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


def safe_load_unique(text: str) -> Any:
    """`yaml.safe_load`, except that a mapping naming a key twice raises `DuplicateKeyError`."""
    return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass: plain data only
