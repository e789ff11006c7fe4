"""README tables rendered from benchmarks/results/, never copied by hand.

A table in the README sits between `<!-- table:NAME -->` and `<!-- /table -->`; `TABLES[NAME]`
renders it from the result files. `python -m benchmarks.tables` rewrites every such block;
`python -m benchmarks.tables --check` exits 1 naming each block that no longer matches (a
test runs the check).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.provenance import latest  # noqa: E402  (after the path fix above)

RESULTS = ROOT / "benchmarks" / "results"
README = ROOT / "README.md"
BLOCK = re.compile(r"(<!-- table:(?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /table -->)", re.S)


def real_base() -> str:
    """The real tier's base accuracy per config: the newest --base-only entry of each."""
    runs = json.loads((RESULTS / "real_learning.json").read_text())["runs"]
    rows = ["| config | workflow | routing | base accuracy | role formats parsed | measured |",
            "|---|---|---|---|---|---|"]
    for e in latest([r for r in runs if r.get("base_only")], "config"):
        formats = ", ".join(f"{k} {v:.2f}" for k, v in sorted(e.get("role_format_base", {}).items())) or "—"
        rows.append(f"| `{e['config']}` | {e['workflow']} | {e['routing'] or '—'} | {e['base']:.2f} "
                    f"(n={e['val_problems']}) | {formats} | {e['date'][:10]}, {str(e['commit'])[:7]}"
                    f"{' (dirty)' if e.get('dirty') else ''} |")
    model = {e.get("model_sha256") for e in runs if e.get("base_only")}
    rows.append("")
    rows.append(f"Model weights SHA-256: {', '.join(sorted(m[:16] + '…' for m in model if m))}.")
    return "\n".join(rows) + "\n"


def real_learning() -> str:
    """The real tier's learning runs: the newest timed run of each config."""
    runs = json.loads((RESULTS / "real_learning.json").read_text())["runs"]
    rows = ["| config | base | best (step, minutes) | budget | role formats parsed: base → best | measured |",
            "|---|---|---|---|---|---|"]
    for e in latest([r for r in runs if not r.get("base_only")], "config", "overrides"):
        base, best = e.get("role_format_base", {}), e.get("role_format", {})
        formats = ", ".join(f"{k} {base.get(k, float('nan')):.2f} → {v:.2f}" for k, v in sorted(best.items())) or "—"
        config = f"`{e['config']}`" + "".join(f" `{o}`" for o in e.get("overrides") or [])
        rows.append(f"| {config} | {e['base']:.2f} | {e['best']:.2f} ({e['best_step']}, {e['minutes_to_best']}) "
                    f"| {e['budget_min']:g} min | {formats} | {e['date'][:10]}, {str(e['commit'])[:7]}"
                    f"{' (dirty)' if e.get('dirty') else ''} |")
    return "\n".join(rows) + "\n"


TABLES: dict[str, Callable[[], str]] = {"real_base": real_base, "real_learning": real_learning}


def render(text: str) -> tuple[str, list[str]]:
    """`text` with every known table block re-rendered, and the names of blocks that changed."""
    changed = []

    def fill(m: re.Match) -> str:
        name = m.group("name")
        if name not in TABLES:
            raise KeyError(f"README table {name!r} has no renderer in benchmarks/tables.py")
        body = TABLES[name]()
        if body != m.group("body"):
            changed.append(name)
        return m.group(1) + body + m.group(4)

    return BLOCK.sub(fill, text), changed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="Exit 1 if a README table differs from its rendering.")
    args = ap.parse_args()
    text = README.read_text()
    new, changed = render(text)
    if args.check:
        for name in changed:
            print(f"README table {name!r} does not match benchmarks/results/ (run python -m benchmarks.tables)")
        return 1 if changed else 0
    README.write_text(new)
    print(f"rewrote {changed or 'nothing'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
