"""The grid file: parse and check it, then expand it into cells (run directories to make).

A grid is the cartesian product of its axes. Each axis has a role:

- `setting` axes fix what is being compared on (task, model, data): each setting gets one
  base-model evaluation and one single-agent RL control per seed, as in the experimental
  matrix of "When Does Multi-Agent RL Improve LLM Workflows? Workflow, Scale, and
  Policy-Sharing Tradeoffs";
- `method` axes vary what is compared (workflow, routing): the control replaces them;
- the `seed` axis (`train.seed`) repeats every run and control.

No config is validated here (see plan.py); this module only reads the grid file and turns
it into `Cell`s whose overrides `load_config` takes as they are. docs/grid.md has the format.
"""
from __future__ import annotations

import itertools
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rolecall.errors import UserError

TOP_KEYS = ("config", "vars", "overrides", "axes", "method", "control", "base_eval")
# An axis listing plain values may be named by a short name for its config key.
ALIASES = {"workflow": "workflow.name", "model": "model.path", "seed": "train.seed"}
SEED_KEY = "train.seed"
# An axis setting one of these keys (or a key under them) is a method axis unless the grid file says
# otherwise. Not the whole workflow section: workflow.prompts usually follows the task.
METHOD_KEYS = ("workflow.name", "workflow.options", "routing", "policies")


def is_method_key(key: str) -> bool:
    return key == "workflow" or any(key == m or key.startswith(m + ".") for m in METHOD_KEYS)


CONTROL_OVERRIDES = {"workflow.name": "single", "workflow.options": {}, "routing": "isolated"}
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_.]*)\}")


class GridError(UserError, ValueError):
    """A grid file (or a grid command line) that cannot be expanded; the message names the problem."""


@dataclass(frozen=True)
class AxisValue:
    label: str  # in cell names and report tables
    sets: dict[str, Any]  # dotted config key -> value ({name} placeholders filled per cell)


@dataclass(frozen=True)
class Axis:
    name: str
    values: tuple[AxisValue, ...]
    role: str  # "setting" | "method" | "seed"

    @property
    def keys(self) -> list[str]:
        """Every config key some value of this axis sets."""
        return sorted({k for v in self.values for k in v.sets})


@dataclass(frozen=True)
class Cell:
    """One run directory of the grid: an RL run, a single-agent control or a base-model evaluation."""

    name: str
    kind: str  # "run" | "control" | "base"
    labels: dict[str, str]  # axis name -> value label, for the axes that apply to this kind
    config: str | None  # the base config file, or None for the built-in defaults
    overrides: tuple[str, ...]  # `dotted.key=value`, as `load_config` takes them

    def to_json(self) -> dict:
        return {"name": self.name, "kind": self.kind, "labels": self.labels, "config": self.config,
                "overrides": list(self.overrides)}


@dataclass
class Grid:
    path: Path
    axes: list[Axis]
    config: str | None = None
    vars: dict[str, str] = field(default_factory=dict)
    overrides: dict[str, Any] = field(default_factory=dict)
    # The single-agent RL control's base config (a template over setting axes and vars) and the
    # overrides that turn a cell into it; the base-model evaluation runs the same config untrained.
    control: dict = field(default_factory=lambda: {"config": None, "overrides": dict(CONTROL_OVERRIDES)})
    controls: bool = True
    base_eval: bool = True
    cli_overrides: list[str] = field(default_factory=list)

    def axes_with(self, role: str) -> list[Axis]:
        return [a for a in self.axes if a.role == role]

    def cells(self) -> list[Cell]:
        """Per setting: its base evaluation, then seed by seed its control and its runs, so a grid
        stopped partway holds whole seeds (every method of a seed beside its control) to pair."""
        setting, seed = self.axes_with("setting"), self.axes_with("seed")
        others = [a for a in self.axes if a.role != "setting"]
        methods = [a for a in others if a.role != "seed"]
        seeds = list(itertools.product(*(a.values for a in seed)))
        out: list[Cell] = []
        for s_vals in itertools.product(*(a.values for a in setting)):
            s_labels = {a.name: v.label for a, v in zip(setting, s_vals)}
            s_sets = [v.sets for v in s_vals]
            if self.base_eval:  # once: untrained, seeds only change the validation sampling (first seed used)
                first = [v.sets for v in seeds[0]] if seeds else []
                out.append(self._cell("base", s_labels, self.control["config"],
                                      [*s_sets, self.control["overrides"], *first]))
            for sd in seeds or [()]:
                chosen = {a.name: v for a, v in zip(seed, sd)}
                if self.controls:
                    labels = {**s_labels, **{name: v.label for name, v in chosen.items()}}
                    out.append(self._cell("control", labels, self.control["config"],
                                          [*s_sets, self.control["overrides"], *(v.sets for v in sd)]))
                for m_vals in itertools.product(*(a.values for a in methods)):
                    values = {**chosen, **{a.name: v for a, v in zip(methods, m_vals)}}
                    labels = {**s_labels, **{a.name: values[a.name].label for a in others}}
                    labels = {a.name: labels[a.name] for a in self.axes}  # file order
                    out.append(self._cell("run", labels, self.config,
                                          [*s_sets, *(values[a.name].sets for a in others)]))
        names = [c.name for c in out]
        dup = next((n for n in names if names.count(n) > 1), None)
        if dup:
            raise GridError(f"two cells would share the directory {dup!r}; give the axis values distinct labels "
                            "(the mapping form `label: {key: value}` names them)")
        return out

    def _cell(self, kind: str, labels: dict[str, str], config: str | None, sets: list[dict]) -> Cell:
        names = {**self.vars, **labels}
        where = f"cell {_name(kind, labels)!r}"
        path = None
        if config is not None:
            filled = _fill(config, names, f"{where}: config", kind)
            p = Path(filled).expanduser()
            path = os.path.normpath(p if p.is_absolute() else (self.path.parent / p))
        pairs = [kv for s in (self.overrides, *sets) for kv in s.items()]  # applied in this order
        ovr = [f"{k}={_yaml_value(_fill_value(v, names, f'{where}: {k}'))}" for k, v in pairs]
        return Cell(_name(kind, labels), kind, labels, path, (*ovr, *self.cli_overrides))


def _name(kind: str, labels: dict[str, str]) -> str:
    """`voting-shared-seed0`, `control-math-seed0`, `base-math`: labels in file order, the kind first."""
    return "-".join(([] if kind == "run" else [kind]) + list(labels.values())) or "run"


def _yaml_value(v: Any) -> str:
    """A value as YAML flow text that `load_config` reads back to the same value (2e-05 stays a float)."""
    text = yaml.safe_dump(v, default_flow_style=True, width=1 << 30, allow_unicode=True).strip()
    return text.removesuffix("...").strip()


def _fill(text: str, names: dict[str, str], where: str, kind: str = "run") -> str:
    def one(m: re.Match) -> str:
        if m.group(1) not in names:
            hint = ("; controls and base evaluations have no method axes: give them their own config "
                    "template with control.config") if kind != "run" else ""
            raise GridError(f"{where}: {{{m.group(1)}}} names no axis or var available here; "
                            f"allowed: {sorted(names) or 'none'}{hint}")
        return names[m.group(1)]

    return _PLACEHOLDER.sub(one, text)


def _fill_value(v: Any, names: dict[str, str], where: str) -> Any:
    if isinstance(v, str):
        return _fill(v, names, where)
    if isinstance(v, dict):
        return {k: _fill_value(x, names, where) for k, x in v.items()}
    if isinstance(v, list):
        return [_fill_value(x, names, where) for x in v]
    return v


# -- reading the file ----------------------------------------------------------------------------
def config_sections() -> set[str]:
    from rolecall.schema import Config

    return set(Config.model_fields)


def load_grid(path: str | Path, cli_args: list[str] = ()) -> Grid:
    """Read a grid file; `cli_args` are `var=value` (a var of the grid) or `dotted.key=value` (every cell)."""
    from rolecall.shipped_configs import existing_or_shipped

    path = existing_or_shipped(path, "grid", GridError)  # `grids/cpu` works without the repository
    try:
        raw = yaml.safe_load(path.read_text("utf-8"))
    except yaml.YAMLError as e:
        raise GridError(f"grid file {str(path)!r}: not valid YAML: {' '.join(str(e).split())}") from None
    if not isinstance(raw, dict):
        raise GridError(f"grid file {str(path)!r} must hold a mapping with at least `axes`")
    where = f"grid file {str(path)!r}"
    unknown = sorted(set(raw) - set(TOP_KEYS))
    if unknown:
        raise GridError(f"{where}: unknown key {unknown[0]!r}; allowed: {list(TOP_KEYS)}")
    sections = config_sections()
    axes = _axes(raw.get("axes"), where, sections)
    _assign_roles(axes, raw.get("method"), where)
    grid = Grid(path=path, axes=axes, config=_opt_str(raw.get("config"), f"{where}: config"),
                vars=_vars(raw.get("vars"), axes, sections, where),
                overrides=_overrides(raw.get("overrides"), f"{where}: overrides", sections),
                control=_control(raw.get("control"), where, sections), controls=raw.get("control") is not False,
                base_eval=raw.get("base_eval", True))
    if not isinstance(grid.base_eval, bool):
        raise GridError(f"{where}: base_eval must be true or false, got {grid.base_eval!r}")
    _apply_cli(grid, list(cli_args), sections)
    missing = [k for k, v in grid.vars.items() if v is None]
    if missing:
        raise GridError(f"{where}: no value for {', '.join(missing)}; pass " + " ".join(f"{k}=VALUE" for k in missing))
    if grid.control["config"] is None:
        grid.control["config"] = grid.config
    return grid


def _opt_str(v: Any, where: str) -> str | None:
    if v is not None and not isinstance(v, str):
        raise GridError(f"{where}: expected a path, got {v!r}")
    return v


def _check_key(key: Any, where: str, sections: set[str]) -> str:
    if not isinstance(key, str) or not key or key.split(".")[0] not in sections:
        raise GridError(f"{where}: {key!r} is not a config key; allowed: dotted keys under {sorted(sections)}")
    return key


def _overrides(raw: Any, where: str, sections: set[str]) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise GridError(f"{where}: expected a mapping of dotted.key: value, got {raw!r}")
    return {_check_key(k, where, sections): v for k, v in raw.items()}


def _label(v: Any) -> str:
    text = str(v).rstrip("/")
    text = text.rsplit("/", 1)[-1] if "/" in text else text  # a path: its last part
    return re.sub(r"[^A-Za-z0-9._+=-]+", "_", text).strip("_") or "_"


def _axes(raw: Any, where: str, sections: set[str]) -> list[Axis]:
    if not isinstance(raw, dict) or not raw:
        raise GridError(f"{where}: `axes` must be a non-empty mapping of axis name to values")
    axes = []
    for name, values in raw.items():
        at = f"{where}: axis {name!r}"
        if not isinstance(name, str) or not name:
            raise GridError(f"{at}: an axis name must be a non-empty string")
        if isinstance(values, list):
            key = _check_key(ALIASES.get(name, name), f"{at} (a list sets the config key it is named after)", sections)
            vals = [AxisValue(f"seed{v}" if key == SEED_KEY else _label(v), {key: v}) for v in values]
        elif isinstance(values, dict):
            vals = []
            for label, sets in values.items():
                if sets is not None and not isinstance(sets, dict):
                    raise GridError(f"{at}: value {label!r} must map dotted config keys to values, got {sets!r}")
                vals.append(AxisValue(_label(label), _overrides(sets, f"{at}: value {label!r}", sections)))
        else:
            raise GridError(f"{at}: expected a list of values or a mapping of label: {{key: value}}, got {values!r}")
        if not vals:
            raise GridError(f"{at}: empty; list at least one value")
        labels = [v.label for v in vals]
        dup = next((x for x in labels if labels.count(x) > 1), None)
        if dup:
            raise GridError(f"{at}: two values share the label {dup!r}; name them with the mapping form label: {{key: value}}")
        role = "seed" if isinstance(values, list) and ALIASES.get(name, name) == SEED_KEY else "setting"
        axes.append(Axis(name, tuple(vals), role))
    if sum(a.role == "seed" for a in axes) > 1:
        raise GridError(f"{where}: more than one axis sets {SEED_KEY}")
    return axes


def _assign_roles(axes: list[Axis], method: Any, where: str) -> None:
    names = [a.name for a in axes]
    if method is None:  # inferred: the axes that change the workflow or the routing
        chosen = [a.name for a in axes if a.role != "seed" and any(map(is_method_key, a.keys))]
    elif isinstance(method, list) and all(isinstance(m, str) for m in method):
        bad = [m for m in method if m not in names or m == next((a.name for a in axes if a.role == "seed"), None)]
        if bad:
            raise GridError(f"{where}: method: {bad[0]!r} is not a non-seed axis; allowed: "
                            f"{[a.name for a in axes if a.role != 'seed']}")
        chosen = method
    else:
        raise GridError(f"{where}: method must list axis names, got {method!r}")
    for i, a in enumerate(axes):
        if a.name in chosen:
            axes[i] = Axis(a.name, a.values, "method")


def _vars(raw: Any, axes: list[Axis], sections: set[str], where: str) -> dict[str, str | None]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise GridError(f"{where}: vars must map names to default values (null = must be given)")
    out: dict[str, str | None] = {}
    for k, v in raw.items():
        if not isinstance(k, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
            raise GridError(f"{where}: var {k!r}: names are letters, digits and _")
        if k in sections or k in {a.name for a in axes}:
            raise GridError(f"{where}: var {k!r} has the name of a config section or an axis; rename it")
        if isinstance(v, (dict, list)):
            raise GridError(f"{where}: var {k!r}: a default is a plain value, got {v!r}")
        out[k] = None if v is None else str(v)
    return out


def _control(raw: Any, where: str, sections: set[str]) -> dict:
    if raw is None or isinstance(raw, bool):  # false: no control runs (the base evaluation still uses this)
        raw = {}
    if not isinstance(raw, dict) or set(raw) - {"config", "overrides"}:
        raise GridError(f"{where}: control must be false or a mapping with `config` and/or `overrides`")
    return {"config": _opt_str(raw.get("config"), f"{where}: control.config"),
            "overrides": {**CONTROL_OVERRIDES, **_overrides(raw.get("overrides"), f"{where}: control.overrides", sections)}}


def _apply_cli(grid: Grid, args: list[str], sections: set[str]) -> None:
    for item in args:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise GridError(f"argument {item!r}: expected var=value or dotted.key=value")
        if key in grid.vars:
            grid.vars[key] = value
            continue
        if key.split(".")[0] not in sections:
            raise GridError(f"argument {item!r}: {key!r} is neither a var of this grid ({sorted(grid.vars) or 'none'}) "
                            f"nor a config key")
        for a in grid.axes:
            for k in a.keys:
                if k == key or k.startswith(key + ".") or key.startswith(k + "."):
                    raise GridError(f"argument {item!r}: {k} is set by the grid's axis {a.name!r}; "
                                    "change the axis in the grid file instead")
        grid.cli_overrides.append(item)
