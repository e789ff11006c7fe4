"""Run a comparison unit by unit, resumably, and write its record.

    DIR/compare.json           the options and what was decided while running (seeds, the long
                               controls' lengths, which checkpoint each matched reading took)
    DIR/runs/<unit>/           an ordinary run directory per training unit (grid markers: done, failed)
    DIR/evals/<name>.json      one evaluation per arm (`evaluate.py`); <name>.failed.txt if it failed
    DIR/record.json            the questions, their answers and the provenance (`record.py`)
    DIR/report.html            the same as one page

A finished unit is never run again; a started training unit resumes from its checkpoint and a
started evaluation from its last finished chunk. A unit that fails is recorded and the comparison
goes on (the questions that need it say "not run"); the command then exits 1.
"""
from __future__ import annotations

import json
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from rolecall.compare import plan as P
from rolecall.compare.costs import cumulative, step_within, totals
from rolecall.compare.evaluate import evaluate_arm, read_eval
from rolecall.fsio import write_atomic

INDEX = "compare.json"


@dataclass
class State:
    """What compare.json holds besides the options."""

    seeds: list[int]
    long_control: dict[str, dict] = field(default_factory=dict)  # "seed" -> long_control_steps(...)
    matched: dict[str, dict] = field(default_factory=dict)  # trained unit -> matching -> eval name or None
    stopping: list[dict] = field(default_factory=list)  # each look --target-mde took
    failed: dict[str, str] = field(default_factory=dict)


class Comparison:
    """A comparison directory being run: its options, its state and how to reach its units."""

    def __init__(self, out: Path, opts: P.Options, state: State, notify: Callable[[str], None]) -> None:
        self.out, self.opts, self.state, self.notify = Path(out), opts, state, notify
        self.wfs = P.workflows(opts)

    # -- the directory ---------------------------------------------------------------------------------
    @classmethod
    def open(cls, out: Path, opts: P.Options | None, resume: bool, notify: Callable[[str], None]) -> "Comparison":
        out = Path(out)
        index = out / INDEX
        if index.is_file():
            saved = json.loads(index.read_text("utf-8"))
            kept = P.Options.from_json(saved["options"])
            if not resume:
                raise P.CompareError(f"{out} already holds a comparison; pass --resume to continue it "
                                     "(finished units are kept) or choose another --out")
            if opts is not None and opts.to_json() != kept.to_json():
                diff = next(k for k, v in opts.to_json().items() if kept.to_json().get(k) != v)
                raise P.CompareError(f"{out} was started with {diff}={kept.to_json().get(diff)!r}, not {opts.to_json()[diff]!r}; "
                                     "resume with the options it was started with, or choose another --out")
            st = saved.get("state") or {}
            state = State(seeds=st.get("seeds") or list(range(kept.seeds)), long_control=st.get("long_control", {}),
                          matched=st.get("matched", {}), stopping=st.get("stopping", []))
            return cls(out, kept, state, notify)
        if opts is None:
            raise P.CompareError(f"{out} holds no comparison ({INDEX}); start one with rolecall compare CONFIG --out {out}")
        if out.exists() and any(out.iterdir()):
            raise P.CompareError(f"--out {str(out)!r} already exists and is not a comparison directory; choose another")
        opts.check()
        self = cls(out, opts, State(seeds=list(range(opts.seeds))), notify)
        self.save()
        return self

    def save(self) -> None:
        s = self.state
        doc = {"options": self.opts.to_json(), "state": {"seeds": s.seeds, "long_control": s.long_control,
                                                          "matched": s.matched, "stopping": s.stopping}}
        self.out.mkdir(parents=True, exist_ok=True)
        write_atomic(self.out / INDEX, json.dumps(doc, indent=1) + "\n")

    def run_dir(self, name: str) -> Path:
        return self.out / "runs" / name

    def eval_path(self, name: str) -> Path:
        return self.out / "evals" / f"{name}.json"

    def evals(self) -> dict[str, dict]:
        d = self.out / "evals"
        docs = {p.stem: read_eval(p) for p in sorted(d.glob("*.json"))} if d.is_dir() else {}
        return {k: v for k, v in docs.items() if v is not None}

    def plan_doc(self) -> dict:
        """What `questions.ask` reads: the workflows, routings, seeds and the matched readings."""
        return {"seeds": list(self.state.seeds), "matched": self.state.matched,
                "workflows": [{"label": w.label, "routings": list(w.routings), "family": w.family,
                               "structure": w.structure} for w in self.wfs]}

    # -- running -----------------------------------------------------------------------------------------
    def run(self, listener) -> None:
        for unit in P.untrained_units(self.wfs):
            self.unit(unit, listener)
        i = 0
        while i < len(self.state.seeds):
            for unit in P.seed_units(self.opts, self.wfs, self.state.seeds[i]):
                self.unit(unit, listener)
            i += 1
            if i == len(self.state.seeds) and self.more_seeds():
                self.state.seeds.append(max(self.state.seeds) + 1)
            self.save()

    def more_seeds(self) -> bool:
        """`--target-mde`: another seed while some headline question's detectable effect is above the
        target and the cap allows; each look is kept in the record."""
        from rolecall.compare.questions import ask, headline

        target = self.opts.target_mde
        if target is None:
            return False
        qs = headline(ask(self.evals(), self.plan_doc()))
        worst = max((q["mde80"] for q in qs), default=float("inf"))
        more = worst > target and len(self.state.seeds) < self.opts.max_seeds
        self.state.stopping.append({"seeds": len(self.state.seeds), "largest_mde80": round(worst, 4),
                                    "target": target, "decision": "add a seed" if more else "stop"})
        return more

    def unit(self, unit: P.Unit, listener) -> None:
        try:
            if unit.kind == "train":
                self.train(unit, listener)
            else:
                self.evaluate(unit, listener)
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as e:  # noqa: BLE001 - one unit's failure must not stop the comparison
            from rolecall.rundir.stop import TrainingStopped

            if isinstance(e, TrainingStopped):
                raise
            self.fail(unit, e)

    def fail(self, unit: P.Unit, e: BaseException) -> None:
        from rolecall.grid.runner import describe_error

        text = describe_error(e)
        self.state.failed[f"{unit.kind}:{unit.name}"] = text
        if unit.kind == "eval":
            path = self.eval_path(unit.name)
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path.with_name(path.stem + ".failed.txt"), text + "\n\n" + traceback.format_exc())
        self.notify(f"failed: {unit.kind} {unit.name}: {text}")

    def train(self, unit: P.Unit, listener) -> None:
        from rolecall.grid import layout
        from rolecall.grid.cells import run_cell
        from rolecall.grid.runner import CellJob, execute_cell
        from rolecall.grid.spec import Cell

        path = self.run_dir(unit.name)
        if layout.status(path)[0] == "done":
            return
        cfg = unit.config if unit.arm != "long_control" else self.long_control_config(unit.seed)
        job = CellJob(Cell(unit.name, "control" if "control" in unit.arm else "run", {"unit": unit.name}, None, ()),
                      cfg, path)
        result = execute_cell(job, run_cell, listener)
        if listener:
            listener.finished(result)
        if result.status == "failed":
            self.state.failed[f"train:{unit.name}"] = result.error or "failed"

    def long_control_config(self, seed: int):
        """The long control of `seed`, its length set from the seed's finished control and trained arms."""
        key = str(seed)
        if key not in self.state.long_control:
            trained = [self.rows(f"{w.label}-{r}-seed{seed}") for w in self.wfs for r in w.routings]
            ctl = P.control_config(self.opts, seed)
            self.state.long_control[key] = P.long_control_steps(
                self.rows(f"control-seed{seed}"), [t for t in trained if t], ctl.train.steps,
                ctl.train.checkpoint_every, self.opts.long_factor)
            self.save()
        return P.long_control_config(self.opts, seed, self.state.long_control[key]["steps"])

    def rows(self, unit_name: str) -> list[dict]:
        from rolecall.diagnostics.metrics_log import read_metrics

        path = self.run_dir(unit_name) / "metrics.jsonl"
        return read_metrics(path)[0] if path.is_file() else []

    # -- evaluations ----------------------------------------------------------------------------------------
    def evaluate(self, unit: P.Unit, listener) -> None:
        if unit.arm == "long_control":
            for name, step in self.matched_steps(unit.seed).items():
                self.evaluate_one(unit, name, listener, step=step)
            return
        self.evaluate_one(unit, unit.name, listener)

    def evaluate_one(self, unit: P.Unit, name: str, listener, step: int | None = None) -> None:
        from rolecall.rundir.checkpoint import checkpoint_of

        path = self.eval_path(name)
        if path.is_file():
            return
        cfg, run, base = self.eval_setup(unit)
        ckpt = checkpoint_of(run, step) if run is not None and not base and unit.arm != "transfer" else None
        at = step if step is not None else (_step_of(ckpt) if ckpt else 0)
        meta = {"name": name, "arm": unit.arm, "seed": unit.seed, "workflow": unit.workflow, "routing": unit.routing,
                "checkpoint_step": at, "run": str(run.relative_to(self.out)) if run else None,
                "cost": cumulative(self.rows(run.name)).get(at) if run is not None and unit.arm != "transfer" else None,
                "started": time.strftime("%Y-%m-%d %H:%M:%S")}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.with_name(path.stem + ".failed.txt").unlink(missing_ok=True)
        if listener:
            listener.evaluating(name, 0, 1)
        evaluate_arm(P.eval_config(cfg), path, meta, samples=self.opts.samples, chunk_problems=self.opts.chunk_problems,
                     checkpoint=ckpt, base=base, progress=lambda d, t: listener and listener.evaluating(name, d, t))
        if listener:
            listener.evaluated(name, read_eval(path))

    def eval_setup(self, unit: P.Unit):
        """(config, run directory whose checkpoint is evaluated or None, adapters off)."""
        seed = unit.seed if unit.seed is not None else 0
        if unit.arm == "untrained":
            wf = next(w for w in self.wfs if w.label == unit.workflow)
            return P.trained_config(self.opts, wf, wf.routings[0], seed), None, True
        if unit.arm in ("control", "long_control"):
            run = self.run_dir(f"{unit.arm}-seed{seed}")
            return P.load_config_of(run), _done(run), False
        wf = next(w for w in self.wfs if w.label == unit.workflow)
        if unit.arm == "transfer":
            run = _done(self.run_dir(f"control-seed{seed}"))
            return P.transfer_config(self.opts, wf, run), run, False
        run = self.run_dir(f"{wf.label}-{unit.routing}-seed{seed}")
        return P.load_config_of(run), _done(run), False

    def matched_steps(self, seed: int) -> dict[str, int]:
        """The long control's checkpoints that match each trained arm of `seed` in generated tokens and
        in training seconds (eval name -> step); what each arm reads is kept in the state."""
        from rolecall.rundir.checkpoint import is_complete

        run = _done(self.run_dir(f"long_control-seed{seed}"))
        rows = self.rows(run.name)
        steps = [int(p.name.removeprefix("step_")) for p in (run / "checkpoints").glob("step_*")
                 if p.name.removeprefix("step_").isdigit() and is_complete(p)]
        have = totals(rows)
        out: dict[str, int] = {}
        for wf in self.wfs:
            for routing in wf.routings:
                arm = f"{wf.label}-{routing}-seed{seed}"
                need = totals(self.rows(arm))
                readings = self.state.matched.setdefault(arm, {})
                for matching in ("generated_tokens", "wall_seconds"):
                    step = step_within(rows, steps, matching, need[matching]) if have[matching] >= need[matching] else None
                    readings[matching] = None if step is None else f"long_control-seed{seed}-step{step}"
                    readings[f"{matching}_reach"] = round(have[matching] / need[matching], 3) if need[matching] else None
                    if step is not None:
                        out[readings[matching]] = step
        self.save()
        return out


def _done(run: Path) -> Path:
    from rolecall.grid import layout

    status, error = layout.status(run)
    if status != "done":
        raise P.CompareError(f"{run.name} is {status}{': ' + error if error else ''}; its evaluation needs it finished")
    return run


def _step_of(ckpt: Path) -> int:
    return int(ckpt.name.removeprefix("step_"))
