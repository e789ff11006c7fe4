"""One entry for every benchmark: `python -m benchmarks` lists them, `python -m benchmarks NAME
[ARGS...]` runs one (its own `--help` says what it takes).

A benchmark measures speed or memory. The experiments still listed here (whether something
learns, what a role does at step 0) are on their way to configs run by the product's own
commands (`rolecall grid`, `rolecall compare`); until each has moved, it runs from here so that
the command recorded in its result file still reproduces it.
"""
from __future__ import annotations

import ast
import runpy
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

# name -> kind. Every other module here is a helper of these, named in HELPERS (a test keeps every
# module in one list or the other).
SPEED = ("run", "compute", "compute_peers", "trl_compare", "comlrl_compare", "scaling", "data_parallel",
         "diagnostics_overhead", "shared_machine", "ray_rollout", "grid_cpu", "real_speed", "real_peers",
         "real_precision_speed", "real_profile")
MEMORY = ("real_memory",)
EXPERIMENTS = ("deliberation",
               "search_answer", "real_learning", "real_interventions", "real_precision",
               "real_warm_start")
HELPERS = ("__init__", "__main__", "provenance", "children", "compute_model", "policy_sharing", "comlrl_arm", "tables",
           "tables_grid", "tables_deliberation",
           "vllm_check")  # run by vllm_cpu.sh, in a venv of its own
BENCHMARKS = {**{n: "speed" for n in SPEED}, **{n: "memory" for n in MEMORY},
              **{n: "experiment" for n in EXPERIMENTS}}


def summary(name: str) -> str:
    """The first line of a benchmark's docstring, read without importing it (imports are heavy)."""
    doc = ast.get_docstring(ast.parse((HERE / f"{name}.py").read_text())) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "list"):
        width = max(map(len, BENCHMARKS))
        print("python -m benchmarks NAME [ARGS...]   (NAME --help for its options)\n")
        for kind in ("speed", "memory", "experiment"):
            print(f"{kind}:")
            for name, k in BENCHMARKS.items():
                if k == kind:
                    print(f"  {name:<{width}}  {summary(name)}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in BENCHMARKS:
        print(f"no benchmark named {name!r}; `python -m benchmarks` lists them: {', '.join(BENCHMARKS)}",
              file=sys.stderr)
        return 2
    sys.argv = [name, *rest]  # the recorded command is the one typed (provenance.command)
    runpy.run_module(f"benchmarks.{name}", run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
