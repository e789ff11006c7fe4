"""What `rolecall compare` runs: its options, and the arms of one seed as training and evaluation units.

From one multi-agent config (or several that share a task, a model and a budget), per seed:

- `control`: the single-agent RL control, the workflow replaced by `single` on the same task,
  model and budget (steps x problems x samples): equal problems;
- the workflow trained under each routing asked (`<workflow>-<routing>`);
- `long_control`: the same control trained past every trained arm's generated tokens and
  training seconds (its length set from theirs once they are done), its checkpoints kept, so
  that equal tokens and equal time read a checkpoint instead of an extrapolation;
- the generator transfer (`<workflow>-transfer`, evaluation only): the control's adapter on
  the roles that answer the problem (`Workflow.answering_roles`), the base model on the others,
  as in Table 3 of "When Does Multi-Agent RL Improve LLM Workflows?";

and once, the untrained workflow (`<workflow>-untrained`, evaluation only: adapters off).
Every arm is evaluated the same way: each distinct validation problem answered `samples`
times at the training temperature, seeded per request.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rolecall.config import Config, ConfigError, load_config
from rolecall.errors import UserError

CONTROL = {"workflow.name": "single", "workflow.options": {}, "routing": "isolated"}
TRANSFER_POLICY = "sa_rl"


class CompareError(UserError, ValueError):
    """A compare command or directory that cannot be planned; the message names the problem."""


@dataclass
class Options:
    """Everything a comparison is planned from; kept in `<dir>/compare.json` so a resume plans the same."""

    configs: list[str]  # the multi-agent configs (paths as given, or shipped names)
    overrides: list[str] = field(default_factory=list)  # dotted.key=value, every arm
    seeds: int = 5  # seeds to start with (train.seed 0..seeds-1)
    samples: int = 8  # answers per validation problem in every evaluation
    routings: list[str] = field(default_factory=list)  # empty: each config's own
    long_factor: float = 1.5  # the long control trains this far past the trained arms' costs
    target_mde: float | None = None  # keep adding seeds until every headline question's MDE is below it
    max_seeds: int = 10
    transfer: bool = True
    chunk_problems: int = 25  # problems per evaluation chunk (the unit of an evaluation's resume)

    def check(self) -> None:
        if not self.configs:
            raise CompareError("name at least one multi-agent config to compare")
        for name, value, low in (("--seeds", self.seeds, 1), ("--samples", self.samples, 1),
                                 ("--max-seeds", self.max_seeds, 1), ("chunk_problems", self.chunk_problems, 1)):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise CompareError(f"{name}: must be a whole number >= {low}, got {value!r}")
        if self.seeds < 2 and self.target_mde is None:
            raise CompareError("--seeds: at least 2; one seed cannot tell a training effect from the seed's luck")
        if not (isinstance(self.long_factor, (int, float)) and math.isfinite(self.long_factor) and self.long_factor >= 1):
            raise CompareError(f"--long-factor: must be a number >= 1, got {self.long_factor!r}")
        if self.target_mde is not None and not (0 < self.target_mde < 1):
            raise CompareError(f"--target-mde: an accuracy difference in (0, 1), got {self.target_mde!r}")
        if self.max_seeds < self.seeds:
            raise CompareError(f"--max-seeds ({self.max_seeds}) is below --seeds ({self.seeds})")
        bad = [r for r in self.routings if r not in ("isolated", "shared")]
        if bad:
            raise CompareError(f"--routing: {bad[0]!r}; allowed: isolated, shared (a custom routing: set it in the config)")

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: dict) -> "Options":
        return cls(**{k: v for k, v in doc.items() if k in cls.__dataclass_fields__})


FILE_KEYS = ("configs", "overrides", "seeds", "samples", "routings", "long_factor", "target_mde", "max_seeds",
             "transfer", "chunk_problems")


def compare_file(path: Path) -> dict | None:
    """A compare file's options (configs relative to the file), or None when `path` is a run config.

    A compare file is YAML with a `configs` list and any of the other `Options` fields, so that a
    recorded comparison is one command: `rolecall compare configs/compares/NAME.yaml`."""
    import yaml

    try:
        raw = yaml.safe_load(Path(path).read_text("utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    if not isinstance(raw, dict) or "configs" not in raw:
        return None
    where = f"compare file {str(path)!r}"
    unknown = sorted(set(raw) - set(FILE_KEYS))
    if unknown:
        raise CompareError(f"{where}: unknown key {unknown[0]!r}; allowed: {list(FILE_KEYS)}")
    if not isinstance(raw["configs"], list) or not raw["configs"]:
        raise CompareError(f"{where}: configs must list the multi-agent configs to compare")
    here = Path(path).parent
    raw["configs"] = [str(here / c) if not Path(c).is_absolute() and (here / c).exists() else str(c) for c in raw["configs"]]
    ovr = raw.get("overrides") or {}
    if not isinstance(ovr, dict):
        raise CompareError(f"{where}: overrides must map dotted.key: value")
    raw["overrides"] = [f"{k}={json.dumps(v)}" for k, v in ovr.items()]
    return raw


@dataclass(frozen=True)
class Workflow:
    """One multi-agent config of the comparison."""

    label: str  # its workflow name; its config file's name where two configs run one workflow
    config: str  # the config file as given
    routings: tuple[str, ...]
    answering: tuple[str, ...]  # roles the transfer plays with the control's adapter
    roles: tuple[str, ...]
    family: str = ""  # the workflow's name: configs of one family are also compared with each other
    structure: str = ""  # the label whose untrained and transfer arms this one shares (the same workflow)


@dataclass(frozen=True)
class Unit:
    """One piece of work: a run directory to train (`train`) or an arm to evaluate (`eval`)."""

    name: str
    kind: str  # train | eval
    arm: str  # control | long_control | trained | transfer | untrained
    seed: int | None
    workflow: str | None  # the workflow label (None for the controls)
    routing: str | None = None
    config: Config | None = None  # train units; eval units build theirs when they run (they need trained runs)


def load_checked(config: str, overrides: list[str]) -> Config:
    try:
        return load_config(config, overrides)
    except ConfigError as e:
        raise CompareError(f"{config}: {e}") from None


def workflows(opts: Options) -> list[Workflow]:
    """The configs as workflows; refused when one is the single-agent workflow or they differ in task,
    model or budget (the controls are shared)."""
    from rolecall.compose.team import build_team

    out, first, structures = [], None, {}
    names = [load_checked(path, opts.overrides).workflow.name for path in opts.configs]
    for path, name in zip(opts.configs, names):
        cfg = load_checked(path, opts.overrides)
        if cfg.workflow.name == "single":
            raise CompareError(f"{path}: the single-agent workflow is the control itself; give a multi-agent config")
        if cfg.metapolicy is not None:
            raise CompareError(f"{path}: a meta-policy config trains no adapter to compare; give an RL config")
        key = budget_key(cfg)
        if first is not None and key != first[1]:
            raise CompareError(f"{path} and {first[0]} differ in task, model or budget ({_first_diff(first[1], key)}); "
                               "the arms of one comparison share the control: compare them separately")
        first = first or (path, key)
        wf = build_team(cfg).workflow
        routing = cfg.routing if isinstance(cfg.routing, str) else "custom"
        label = name if names.count(name) == 1 else Path(path).stem  # two variants of one workflow: their files
        if any(w.label == label for w in out):
            raise CompareError(f"{path}: the label {label!r} is taken; two configs of one workflow are told apart "
                               "by their file names (both routings of one config: --routing isolated --routing shared)")
        # Variants that differ only in how they train (credit, learning rate) share the untrained workflow
        # and the transfer: the same workflow, prompts and options give the same arms.
        shape = json.dumps([name, cfg.workflow.options, cfg.workflow.prompts], sort_keys=True)
        structures.setdefault(shape, label)
        out.append(Workflow(label, path, tuple(opts.routings) or (routing,), tuple(wf.answering_roles), tuple(wf.roles),
                            family=name, structure=structures[shape]))
    return out


def budget_key(cfg: Config) -> dict:
    """What the arms must share: task, data, model, reward and the training budget."""
    r = cfg.rollout
    return {"task": cfg.task.model_dump(mode="json"), "data": cfg.data.model_dump(mode="json"),
            "model": cfg.model.model_dump(mode="json"), "reward": cfg.reward.model_dump(mode="json"),
            "steps": cfg.train.steps, "problems_per_step": r.problems_per_step, "group_size": r.group_size,
            "temperature": r.temperature, "max_new_tokens": r.max_new_tokens}


def _first_diff(a: dict, b: dict) -> str:
    key = next(k for k in a if a[k] != b.get(k))
    return f"{key}: {json.dumps(a[key])} against {json.dumps(b[key])}"


def load_config_of(run: Path) -> Config:
    """The config a run directory of the comparison was trained with."""
    return load_checked(str(run / "config.yaml"), [])


def seed_overrides(seed: int) -> list[str]:
    # No early stop: an arm that stopped early would train on fewer problems than its pair.
    return [f"train.seed={seed}", "train.stop_below_peak=null"]


def control_overrides(opts: Options) -> list[str]:
    """What turns the first config into the single-agent control: the workflow, its routing and
    policies, and the per-role settings of roles the control does not have (its one role keeps its own)."""
    cfg = load_checked(opts.configs[0], opts.overrides)
    own = lambda by_role: {r: v for r, v in by_role.items() if r == "generator"}  # noqa: E731 - single's one role
    return [*(f"{k}={json.dumps(v)}" for k, v in CONTROL.items()), "policies=null",
            f"rollout.max_new_tokens_by_role={json.dumps(own(cfg.rollout.max_new_tokens_by_role))}",
            f"algo.kl_coef_by_role={json.dumps(own(cfg.algo.kl_coef_by_role))}"]


def control_config(opts: Options, seed: int) -> Config:
    return load_checked(opts.configs[0], [*opts.overrides, *seed_overrides(seed), *control_overrides(opts)])


def trained_config(opts: Options, wf: Workflow, routing: str, seed: int) -> Config:
    own = [] if routing == "custom" else [f"routing={routing}"]
    return load_checked(wf.config, [*opts.overrides, *own, *seed_overrides(seed)])


def long_control_config(opts: Options, seed: int, steps: int) -> Config:
    """The control trained for `steps`, every checkpoint kept (the matched readings pick among them)."""
    cfg = control_config(opts, seed)
    every = cfg.train.checkpoint_every
    # Its periodic validation is only a curve to look at (the matched readings evaluate checkpoints):
    # about four of them, not one per val_every of a run several times longer.
    val_every = max(cfg.train.val_every, every * max(1, steps // (4 * every)))
    return load_checked(opts.configs[0], [*opts.overrides, *seed_overrides(seed), *control_overrides(opts),
                                          f"train.steps={steps}", f"train.checkpoint_every={every}",
                                          f"train.val_every={val_every}", f"train.keep_last={steps // every + 2}"])


def transfer_routing(wf: Workflow) -> dict[str, str]:
    """Each role to the control's adapter (the answering roles) or to the bare base model (the rest)."""
    return {role: (TRANSFER_POLICY if role in wf.answering else "base") for role in wf.roles}


def transfer_config(opts: Options, wf: Workflow, control_run: Path) -> Config:
    """The workflow with the control's adapter on its answering roles and the base model on the rest."""
    routing = transfer_routing(wf)
    return load_checked(wf.config, [*opts.overrides, f"routing={json.dumps(routing)}",
                             f"policies={json.dumps({TRANSFER_POLICY: {'init_from': str(control_run), 'trainable': False}})}"])


def eval_config(cfg: Config) -> Config:
    """An arm's config as evaluated: every model call seeded by itself, so chunks replay exactly."""
    return cfg.model_copy(update={"rollout": cfg.rollout.model_copy(update={"request_seeds": True})})


def seed_units(opts: Options, wfs: list[Workflow], seed: int) -> list[Unit]:
    """The units of one seed in the order they run (the long control's length is set when it runs)."""
    units = [Unit(f"control-seed{seed}", "train", "control", seed, None, config=control_config(opts, seed))]
    for wf in wfs:
        for routing in wf.routings:
            units.append(Unit(f"{wf.label}-{routing}-seed{seed}", "train", "trained", seed, wf.label, routing,
                              trained_config(opts, wf, routing, seed)))
    units.append(Unit(f"long_control-seed{seed}", "train", "long_control", seed, None))
    units.append(Unit(f"control-seed{seed}", "eval", "control", seed, None))
    for wf in wfs:
        for routing in wf.routings:
            units.append(Unit(f"{wf.label}-{routing}-seed{seed}", "eval", "trained", seed, wf.label, routing))
        if opts.transfer and wf.answering and wf.structure == wf.label:
            units.append(Unit(f"{wf.label}-transfer-seed{seed}", "eval", "transfer", seed, wf.label))
    units.append(Unit(f"long_control-seed{seed}", "eval", "long_control", seed, None))
    return units


def untrained_units(wfs: list[Workflow]) -> list[Unit]:
    return [Unit(f"{wf.label}-untrained", "eval", "untrained", None, wf.label) for wf in wfs if wf.structure == wf.label]


def long_control_steps(control_rows: list[dict], trained_rows: list[list[dict]], steps: int, every: int,
                       factor: float) -> dict:
    """How long the long control trains: past the largest generated tokens and training seconds of
    the seed's trained arms, by `factor`, at the control's own rate per step (read from the
    control's run), rounded up to a checkpoint. Returns the steps and what they rest on."""
    from rolecall.compare.costs import totals

    ctl = totals(control_rows)
    need = {m: max((totals(rows)[m] for rows in trained_rows), default=0.0) for m in ("generated_tokens", "wall_seconds")}
    per_step = {m: ctl[m] / max(ctl["steps"], 1) for m in need}
    wanted = max([steps] + [factor * need[m] / per_step[m] for m in need if per_step[m] > 0])
    n = int(math.ceil(wanted / every) * every)
    return {"steps": n, "needed": need, "control_per_step": per_step, "factor": factor}
