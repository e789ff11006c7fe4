"""The configs installed with the package: examples, the papers' presets and grids.

They live in `rolecall/configs/` (the repository's `configs/` points there), so a
`pip install rolecall` without the repository still has them. A shipped config is named by
its path under that folder without `.yaml`: `examples/voting`, `paper/math-voting-ip`,
`paper/maporl/gsm8k-debate-cotrained`, `grids/cpu`.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

CONFIG_ROOT = Path(__file__).resolve().parent / "configs"


def shipped_configs() -> dict[str, Path]:
    """Every shipped config by name, sorted."""
    return {str(p.relative_to(CONFIG_ROOT).with_suffix("")): p for p in sorted(CONFIG_ROOT.rglob("*.yaml"))}


def describe(path: Path) -> str:
    """The config's first comment line (what it is), or '' if it starts with none."""
    for line in path.read_text("utf-8").splitlines():
        if line.startswith("#"):
            return line.lstrip("# ").strip()
        if line.strip():
            break
    return ""


def find_shipped(name: str | Path) -> Path | None:
    """The shipped config a name or path means, if any: `examples/voting`, `examples/voting.yaml`,
    `configs/examples/voting.yaml` (the repository path, for a user without the repository)."""
    text = str(name).replace("\\", "/").removesuffix(".yaml").removesuffix(".yml")
    for prefix in ("./", "configs/"):
        text = text.removeprefix(prefix)
    return shipped_configs().get(text)


def copy_configs(names: list[str], dest: Path, *, overwrite: bool = False) -> list[Path]:
    """Copy the named shipped configs (all when `names` is empty) under `dest`, keeping their folders.

    Nothing is written if a name is unknown or, without `overwrite`, a target exists.
    """
    available = shipped_configs()
    unknown = [n for n in names if find_shipped(n) is None]
    if unknown:
        raise ValueError(f"no shipped config named {unknown}; `rolecall configs` lists them")
    chosen = [find_shipped(n) for n in names] if names else list(available.values())
    for p in list(chosen):  # a grid names its cells' configs by relative path: bring those folders along
        for folder in re.findall(r"\.\./([\w-]+)/", p.read_text("utf-8")):
            chosen += [q for q in available.values() if q.parent == CONFIG_ROOT / folder and q not in chosen]
    targets = {p: Path(dest) / p.relative_to(CONFIG_ROOT) for p in chosen}
    clashes = [str(t) for t in targets.values() if t.exists()]
    if clashes and not overwrite:
        raise FileExistsError(f"{clashes[0]} exists" + (f" (and {len(clashes) - 1} more)" if len(clashes) > 1 else "")
                              + "; pass --force to overwrite")
    for src, dst in targets.items():
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
    return list(targets.values())


def existing_or_shipped(path: str | Path, what: str, error: type[Exception]) -> Path:
    """`path` if it is a file, else the shipped config it names; `error` naming both otherwise.
    `what` is "config" or "grid", as the message says."""
    p = Path(path)
    if p.is_file():
        return p
    shipped = find_shipped(path)  # `examples/voting`, or a repository path without the repository
    if shipped is None:
        raise error(f"{what} file {str(p)!r} does not exist (nor is it a shipped {what}; `rolecall configs` lists those)")
    return shipped
