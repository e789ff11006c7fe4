"""Which code wrote a run, and on which machine: rolecall's version, its source commit when rolecall
runs from a git checkout, and the processor, appended to `<run>/sittings.jsonl` each time a run
starts or resumes.

A run that is resumed can span several commits (a long run continued after a fix elsewhere in
the tree); a result read from it should say which code wrote which steps. A sitting's step is
where it began: the steps after it, up to the next sitting's, are that sitting's; a trainer run in
stages whose steps restart per stage (the deliberation meta-policy's) names the stage too.
`summary.json` lists them (`sittings`). They live in their own file, not in metrics.jsonl, so
every reader of the metric rows stays as it was. The machine is there because a run's wall-clock
seconds are its machine's: a run resumed on another processor, or two runs compared at equal time
that ran on different ones, do not compare in seconds.

The commit is rolecall's own, never the user's project's: it is read only when rolecall's package
folder is tracked in the git work tree that holds it (an editable install of a clone), so a
wheel installed into a virtual environment inside someone's repository records none.
"""
from __future__ import annotations

import functools
import importlib.metadata
import json
import platform
import subprocess
from pathlib import Path

from rolecall.diagnostics.summary import SITTINGS as FILE
from rolecall.rundir.cpu_share import machine_cores

_PACKAGE = Path(__file__).resolve().parents[1]  # .../rolecall


def git(top: Path, *args: str) -> str | None:
    """`git -C top args...`'s output, or None where git is missing, fails or hangs."""
    try:
        done = subprocess.run(["git", "-C", str(top), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):  # no git, or it hung
        return None
    return done.stdout.strip() if done.returncode == 0 else None


@functools.cache
def code_version() -> dict:
    """{"rolecall": version, "commit": sha or None, "dirty": bool or None}; dirty means rolecall's
    own files had uncommitted changes (other files of the tree do not count). Cached: the code a
    process runs does not change under it."""
    try:
        version = importlib.metadata.version("rolecall")
    except importlib.metadata.PackageNotFoundError:  # a source tree put on the path, never installed
        version = None
    top = git(_PACKAGE, "rev-parse", "--show-toplevel")
    tracked = top and git(Path(top), "ls-files", "--", str(_PACKAGE / "__init__.py"))
    if not tracked:
        return {"rolecall": version, "commit": None, "dirty": None}
    status = git(Path(top), "status", "--porcelain", "--untracked-files=no", "--", str(_PACKAGE))
    return {"rolecall": version, "commit": git(Path(top), "rev-parse", "HEAD"),
            "dirty": bool(status) if status is not None else None}


@functools.cache
def machine() -> dict:
    """{"cpu": the processor's model name (None where it cannot be read), "cores": the cores this
    process may use}."""
    cpu = None
    try:
        with open("/proc/cpuinfo") as f:  # Linux: platform.processor() there says only "x86_64"
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), None)
    except OSError:  # not Linux
        pass
    return {"cpu": cpu or platform.processor() or None, "cores": machine_cores()}


def library_versions(names: tuple[str, ...] = ("torch", "transformers", "peft", "reasoning-gym")) -> dict:
    """{package: installed version or None}: what a measured result depends on besides rolecall."""
    out = {}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def record(run_dir: Path, step: int, stage: str | None = None, **more) -> None:
    """Append this process's sitting, beginning at `step` (of `stage`, for a staged trainer), to
    `<run_dir>/sittings.jsonl`, with the caller's `more` (a run's `precision`: per base model,
    the dtype its weights took and why)."""
    where = {"step": step} if stage is None else {"stage": stage, "step": step}
    with open(Path(run_dir) / FILE, "a") as f:
        f.write(json.dumps({**where, **code_version(), "machine": machine(), **more}) + "\n")


def describe(sittings: list[dict]) -> str | None:
    """Which code wrote a run, in words, from its sittings (`rolecall.diagnostics.summary.read_sittings`,
    or `summary.json`'s `sittings`): "abc1234", or "abc1234, def5678+ from step 31" for a run
    resumed on other code ("+": rolecall's files had uncommitted changes; "from softrank step 31"
    where the sitting names its stage); "rolecall 0.1.0" where no commit was known (a wheel);
    "def5678 (on <cpu>) from step 31" where a resume moved to another processor than the sitting
    before it stored. None when the run stored none (made before they were recorded)."""
    said: list[tuple[str, str]] = []  # (where the sitting began, which code, and the processor where it moved)
    code = cpu = None  # the last sitting's code, and the processor the last one that stored one ran on
    for s in sittings:
        what = (f"{str(s['commit'])[:7]}{'+' if s.get('dirty') else ''}" if s.get("commit")
                else f"rolecall {s.get('rolecall') or '?'}")
        here = (s.get("machine") or {}).get("cpu")
        moved = bool(here and cpu and here != cpu)  # a sitting that stored no processor moved nowhere
        if what != code or moved:  # a resume on the same code and machine is the same sitting
            at = f"{s['stage']} step {s.get('step')}" if s.get("stage") else f"step {s.get('step')}"
            said.append((at, f"{what} (on {here})" if moved else what))
        code, cpu = what, here or cpu
    return ", ".join(w if i == 0 else f"{w} from {at}" for i, (at, w) in enumerate(said)) or None


def base_model_of(run_dirs) -> dict | None:
    """The base model (its config and weights hashes) recorded by the first of `run_dirs` that has
    a checkpoint: what a record of several runs names as the model they trained."""
    from rolecall.rundir.checkpoint import checkpoint_fingerprint, latest_checkpoint  # loads torch: only here

    for run in run_dirs:
        ckpt = latest_checkpoint(Path(run))
        fp = checkpoint_fingerprint(ckpt) if ckpt else None
        if fp and fp.get("model"):
            return {k: v for k, v in fp["model"].items() if k != "path"}
    return None
