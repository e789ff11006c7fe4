"""The README's tables are rendered from benchmarks/results/ (benchmarks/tables.py), never copied."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.tables import BLOCK, TABLES, render  # noqa: E402


def test_every_readme_table_matches_its_results():
    text = (ROOT / "README.md").read_text()
    names = [m.group("name") for m in BLOCK.finditer(text)]
    assert names and set(names) <= set(TABLES)
    _, changed = render(text)
    assert changed == [], f"stale README tables {changed}: run python -m benchmarks.tables"


def test_a_hand_edited_number_is_caught():
    text = (ROOT / "README.md").read_text()
    m = next(BLOCK.finditer(text))
    edited = text[:m.start("body")] + m.group("body").replace("0.", "9.", 1) + text[m.end("body"):]
    assert render(edited)[1] == [m.group("name")]
