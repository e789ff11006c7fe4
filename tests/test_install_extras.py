"""Every extra the docs tell a user to install exists, spelt as pip of any age finds it."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# `pip install -e ".[gguf,reasoning-gym]"`, `pip install 'rolecall[humaneval]'`
_EXTRAS = re.compile(r"""(?:rolecall|["']\.)\[([A-Za-z0-9_,\- ]+)\]""")


def test_documented_extras_exist_under_their_normalised_names():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    # pip older than 24 compares a requested extra with the normalised names in the metadata
    # as it is written: "reasoning_gym" silently installed nothing there.
    assert all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", name) for name in extras), sorted(extras)
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "src").rglob("*.py")),
             *sorted((ROOT / "scripts").glob("*")), ROOT / ".ci" / "run"]
    seen = set()
    for f in files:
        if not f.is_file():
            continue
        for m in _EXTRAS.finditer(f.read_text(errors="replace")):
            for name in (n.strip() for n in m.group(1).split(",")):
                seen.add(name)
                assert name in extras, f"{f.relative_to(ROOT)} asks for the extra {name!r}; pyproject has {sorted(extras)}"
    assert {"test", "gguf", "reasoning-gym"} <= seen
