"""The repository stands on its own: no tracked text file points users at documents they
cannot open (the project's private planning notes, numbered tracker items, sibling
directories outside the repository). Papers are cited by title and arXiv id instead, and
anything else is said in place.

The patterns are assembled from pieces so that this file does not match them itself.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".sh", ".js", ".css"}
SKIP_DIRS = ("benchmarks/results/",)  # recorded data, not prose

_SEED, _SPEC, _REL, _ISSUE, _SHARED = "seed", "SP" + "EC", "RELIA" + "BILITY", "iss" + "ue", "sha" + "red"
PATTERNS = [
    re.compile(r"\b" + _SEED + r" 00\d"),                       # a numbered seed document
    re.compile(r"\(" + _SEED + r" \d{3}"),                      # "(seed NNN ..."
    re.compile(_SPEC + r"(\.md| §)"),                           # the product spec's sections
    re.compile(_REL + r"(\.md| #)"),                            # the numbered fault list
    re.compile(r"\b" + _ISSUE + r" #?\d+\b", re.IGNORECASE),    # tracker items
    re.compile(r"\.\./" + _SHARED),                             # a directory outside the repo
]


def _tracked_text_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    files = []
    for name in out.decode("utf-8").split("\0"):
        if not name or Path(name).suffix not in SUFFIXES or name.startswith(SKIP_DIRS):
            continue
        path = ROOT / name
        if path.resolve() == Path(__file__).resolve() or not path.is_file():
            continue
        files.append(path)
    return files


def test_the_scan_sees_the_repository():
    names = {p.relative_to(ROOT).as_posix() for p in _tracked_text_files()}
    assert "pyproject.toml" not in names  # only the listed suffixes
    assert any(n.startswith("src/rolecall/") and n.endswith(".py") for n in names)
    assert any(n.endswith(".md") for n in names)


def test_the_patterns_catch_what_they_should_and_leave_rng_seeds_alone():
    def hits(text):
        return any(p.search(text) for p in PATTERNS)

    for bad in (f"({_SEED} 000, Table 7)", f"{_SEED} 004 compares", f"{_SPEC} §6", f"{_SPEC}.md",
                f"{_REL} #9", f"{_REL}.md", f"{_ISSUE.capitalize()} 5 item 2", f"{_ISSUE} #12",
                f"../{_SHARED}/seeds"):
        assert hits(bad), bad
    for ok in ("seed 42", "train.seed=7", "(seed 7)", "RowIssue(index", "issues: 3", "spec = parse"):
        assert not hits(ok), ok


def test_no_tracked_file_cites_documents_users_cannot_open():
    found = []
    for path in _tracked_text_files():
        try:
            text = path.read_text("utf-8")
        except UnicodeDecodeError:
            continue
        for lineno, line in enumerate(text.splitlines(), 1):
            if any(p.search(line) for p in PATTERNS):
                found.append(f"{path.relative_to(ROOT).as_posix()}:{lineno}: {line.strip()[:120]}")
    assert not found, (f"{len(found)} line(s) cite documents users cannot open; cite the paper by "
                       "title and arXiv id or say in place what is meant:\n" + "\n".join(found))


def test_generic_modules_name_no_role_and_no_workflow():
    """The trainer, diagnostics, estimators, loss and engines work for any workflow: what a
    workflow wants scored or logged it declares itself (Team.grade, Workflow.metrics,
    Workflow.role_diagnostics), so none of these modules may name one of its roles."""
    import re
    from pathlib import Path

    import rolecall

    # (torch's random-number `torch.Generator` and its `generator=` argument are not the role)
    names = re.compile(r"(?<!torch\.)generator(?!\s*=)|evaluator|aggregator|orchestrator|synthesizer|voting|eval_opt|orch_workers"
                       r"|\bworkers?\b|[\"']single[\"']|[\"']candidates[\"']", re.I)
    root = Path(rolecall.__file__).parent
    hits = [f"{p.relative_to(root)}:{i}: {line.strip()}"
            for d in ("train", "algo", "rundir", "compose", "diagnostics", "advantages", "loss", "engines")
            for p in sorted((root / d).rglob("*.py"))
            for i, line in enumerate(p.read_text().splitlines(), 1) if names.search(line)]
    assert not hits, "\n".join(hits)
