"""Check a whole grid before anything runs: every cell's config validates, every input opens.

A grid that would fail in its fortieth cell on a typo must fail now, naming that cell: each
cell's config goes through `load_config` (the same checks as `rolecall train`), and each
distinct model + data + verifier is opened once (`preflight`, as `train --dry-run` does).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

from rolecall.config import Config, ConfigError, load_config
from rolecall.grid.spec import Cell, Grid, GridError


@dataclass(frozen=True)
class Plan:
    grid: Grid
    cells: list[Cell]
    configs: dict[str, Config]  # cell name -> its resolved, validated config


def one_line(text: str) -> str:
    """A multi-line message (a config error lists one field per line) as one line."""
    return re.sub(r"\s*\n\s*", "; ", text.strip()).replace(":;", ":")


def make_plan(grid: Grid) -> Plan:
    """Expand the grid and validate every cell's config; the first failure is raised naming its cell."""
    cells = grid.cells()
    configs: dict[str, Config] = {}
    errors: list[tuple[str, str]] = []
    for cell in cells:
        try:
            configs[cell.name] = load_config(cell.config, list(cell.overrides))
        except ConfigError as e:
            errors.append((cell.name, one_line(str(e))))
    if errors:
        name, msg = errors[0]
        more = f" (and {len(errors) - 1} more cell{'s' * (len(errors) > 2)})" if len(errors) > 1 else ""
        raise GridError(f"cell {name!r}{more}: {msg}")
    return Plan(grid, cells, configs)


def select_cells(plan: Plan, only: list[str]) -> list[Cell]:
    """The cells whose labels match every `AXIS=LABEL` of `only` (all cells when it is empty): a
    part of the grid to run now, such as one seed on each of several machines sharing the
    grid's layout. A cell without that axis (the base evaluation has no seed) is not selected."""
    wanted: dict[str, str] = {}
    axes = {a.name: [v.label for v in a.values] for a in plan.grid.axes}
    for item in only:
        name, sep, label = item.partition("=")
        name, label = name.strip(), label.strip()
        if not sep or not name or not label:
            raise GridError(f"--only {item!r}: give it as AXIS=LABEL, e.g. --only seed=seed2")
        if name not in axes:
            raise GridError(f"--only {item!r}: the grid has no axis {name!r} (its axes: {', '.join(axes) or 'none'})")
        if label not in axes[name]:
            raise GridError(f"--only {item!r}: axis {name!r} has no value {label!r} (its values: "
                            f"{', '.join(axes[name])})")
        if wanted.get(name, label) != label:
            raise GridError(f"--only names axis {name!r} twice, as {wanted[name]!r} and {label!r}")
        wanted[name] = label
    picked = [c for c in plan.cells if all(c.labels.get(k) == v for k, v in wanted.items())]
    if not picked:
        raise GridError(f"--only {' '.join(only)}: no cell of the grid has all of these labels")
    return picked


def input_key(cfg: Config) -> str:
    """What `preflight` reads: model and tokenizer, task and data, and the verifier."""
    return json.dumps({"model": [cfg.model.path, cfg.model.chat_template], "task": cfg.task.model_dump(mode="json"),
                       "data": cfg.data.model_dump(mode="json"), "reward": cfg.reward_cfg().model_dump(mode="json")},
                      sort_keys=True)


def preflight_inputs(plan: Plan, report=lambda line: None) -> int:
    """Open each distinct input once (no weights loaded); raise naming the first cell whose input fails.

    Returns how many distinct inputs were checked."""
    from rolecall.errors import UserError
    from rolecall.train.stack import preflight

    seen: dict[str, str] = {}
    for cell in plan.cells:
        cfg = plan.configs[cell.name]
        key = input_key(cfg)
        if key in seen:
            continue
        seen[key] = cell.name
        try:
            info = preflight(cfg)
        except (UserError, OSError, ValueError) as e:
            raise GridError(f"cell {cell.name!r}: {one_line(str(e))}") from None
        for line in info.pop("data_report"):
            report(f"{cell.name}: {line}")
        report(f"inputs of {cell.name} ok: {json.dumps(info)}")
    return len(seen)
