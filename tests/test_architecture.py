"""The source tree's shape, checked from the code's own imports (an AST over src/, function-local
imports included; `if TYPE_CHECKING:` blocks count for packages and layers, not for module cycles):
no module or package cycle, layers that only import downward, no private name imported across modules, generic modules that name no
shipped workflow, role or meta-policy, and modules and functions of a readable size.
docs/architecture.md explains the layers."""
from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 450, 80

# Lowest first; a module may import its own layer and the layers below it, never above.
LAYERS = [
    {"errors", "types", "paths", "fsio", "yamldata", "parsing", "registry", "version", "tdist"},  # plain data, files, lookup
    {"schema", "tasks", "retrieval", "rewards", "advantages", "loss", "workflows", "metapolicy",
     "policies", "engines", "diagnostics", "rollout"},                                  # the pieces
    {"compose", "basemodel"},                                                           # putting pieces together
    {"algo", "rundir"},                                                                 # the update, the run directory
    {"distributed"},                                                                    # ranks and actors, given to algo
    {"train"},                                                                          # trainers
    {"", "__main__", "config", "api", "export", "cli", "grid", "compare", "metatrain", "report", "machine",
     "shipped_configs", "library_logs", "testing"},
]
# Modules that work for any workflow: they may not name one, nor a role, nor the meta-policy.
GENERIC = ("algo", "rundir", "diagnostics", "advantages", "loss", "engines", "compose", "rollout", "distributed",
           "train.loop", "train.step", "train.stack", "train.session", "train.resume", "train.launch",
           "train.trainers$", "train.trainers.rl", "train.harness")  # `$`: that module only
# The sandbox's runner scripts run as standalone files inside the jail (`python -I -S runner.py`) and
# import their siblings by bare name; they are not rolecall modules.
STANDALONE = re.compile(r"^rolecall\.rewards\.code\.(runner|runner_\w+|jail)$")


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()
TREES = {name: ast.parse(path.read_text("utf-8"), str(path)) for name, path in MODULES.items()}


def _imports(tree: ast.AST, annotations: bool = False):
    """Every import statement, at any depth; those under `if TYPE_CHECKING:` only with `annotations`
    (an import for annotations is still a dependency of the design, if not of the running code)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test) and not annotations:
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        yield from _imports(node, annotations)


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _edges(annotations: bool = False) -> dict[str, set[tuple[str, str]]]:
    """module -> {(imported module, name imported from it or '')}."""
    out: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for mod, tree in TREES.items():
        is_pkg = MODULES[mod].name == "__init__.py"
        for node in _imports(tree, annotations):
            if isinstance(node, ast.Import):
                targets = [(a.name, "") for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    pkg = (mod if is_pkg else mod.rpartition(".")[0]).split(".")
                    base = ".".join(pkg[:len(pkg) - node.level + 1] + ([base] if base else []))
                targets = [(f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base, a.name) for a in node.names]
            for target, name in targets:
                if not target.startswith("rolecall"):
                    continue
                resolved = _resolve(target)
                if resolved and resolved != mod:
                    out[mod].add((resolved, "" if resolved == target and target.endswith(name) else name))
    return out


EDGES = _edges()
EDGES_WITH_ANNOTATIONS = _edges(annotations=True)  # what the package and layer rules read


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one member (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _package(mod: str) -> str:
    return mod.split(".")[1] if "." in mod else ""


def test_no_module_cycles():
    graph = {m: {t for t, _ in ts} for m, ts in EDGES.items()}
    assert _cycles(graph) == []


def test_no_package_cycles():
    graph: dict[str, set[str]] = defaultdict(set)
    for mod, targets in EDGES_WITH_ANNOTATIONS.items():
        for target, _ in targets:
            if _package(mod) != _package(target):
                graph[_package(mod)].add(_package(target))
    assert _cycles(graph) == []


def _layer(mod: str) -> int:
    package = _package(mod)
    hits = [i for i, layer in enumerate(LAYERS) if package in layer]
    assert hits, f"{mod}: its package {package!r} is in no layer of tests/test_architecture.py"
    return hits[0]


def test_layers_import_only_downward():
    upward = sorted(f"{m} -> {t}" for m, ts in EDGES_WITH_ANNOTATIONS.items() for t, _ in ts if _layer(t) > _layer(m))
    assert upward == []


def _private_imports(edges: dict[str, set[tuple[str, str]]]) -> list[str]:
    return sorted(f"{m} imports {name} from {t}" for m, ts in edges.items() for t, name in ts
                  if name.startswith("_") and not name.startswith("__"))


def test_no_private_name_is_imported_across_modules():
    assert _private_imports(EDGES) == []


def _shipped_names() -> tuple[set[str], set[str]]:
    from rolecall.workflows import WORKFLOWS, build_workflow, workflow_prompts

    roles: set[str] = set()
    for name in WORKFLOWS:
        roles |= set(build_workflow(name, workflow_prompts(name, None), {}).roles)
    return set(WORKFLOWS), roles


def _generic(mod: str) -> bool:
    rest = mod.removeprefix("rolecall.")
    return any(rest == g.rstrip("$") or (not g.endswith("$") and rest.startswith(g + ".")) for g in GENERIC)


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def test_generic_modules_name_no_workflow_role_or_meta_policy():
    """A string that is exactly a shipped workflow's or role's name (`== "deliberation"`,
    `routes["aggregator"]`), or any name or string about the meta-policy, is a special case a
    generic module must not make. (Words such as `verifier` or `worker` in prose are fine.)"""
    workflows, roles = _shipped_names()
    names = (workflows | roles) - {"verifier"}  # also rolecall's own word for what scores an answer
    found = []
    for mod, tree in TREES.items():
        if not _generic(mod):
            continue
        skip = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
                text, special = node.value, node.value in names
            elif isinstance(node, (ast.Name, ast.Attribute, ast.arg, ast.FunctionDef, ast.ClassDef)):
                text, special = getattr(node, "id", None) or getattr(node, "attr", None) or getattr(node, "arg", None) \
                    or getattr(node, "name", ""), False
            else:
                continue
            if special or re.search(r"meta.?polic|deliberat", text, re.I):
                found.append(f"{mod}:{node.lineno}: {text[:60]!r}")
    assert found == []


_WORKFLOW_SPECIFIC = ("rolecall.metapolicy", "rolecall.metatrain", "rolecall.workflows.deliberation")
_WORKFLOW_SPECIFIC_WORDS = re.compile(r"deliberat|meta[-_ ]?polic", re.I)  # deliberation/-or, metapolicy, meta-policy


def _train_layer_mentions(sources: dict[str, str]) -> list[str]:
    """`sources`: {module: its text}. Every import (`if TYPE_CHECKING:` ones too) of the
    meta-policy package or the deliberation workflow, and every line that names either."""
    found = []
    for mod, text in sources.items():
        for node in ast.walk(ast.parse(text)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{mod}:{node.lineno}: imports {n}" for n in names
                      if any(n == b or n.startswith(b + ".") for b in _WORKFLOW_SPECIFIC)]
        found += [f"{mod}:{i}: {line.strip()[:70]!r}" for i, line in enumerate(text.splitlines(), 1)
                  if _WORKFLOW_SPECIFIC_WORDS.search(line)]
    return found


def test_the_trainers_layer_names_no_workflow_specific_trainer():
    """Nothing under `rolecall.train` imports the meta-policy package or the deliberation workflow,
    or says "deliberation", "metapolicy" or "meta-policy" in its source: code, strings,
    docstrings and comments alike (the whole text is read, so no comment names it either; a
    trainer another package registers is described as such). That trainer lives with what it
    trains and is registered from the entry layer (`rolecall.config`)."""
    planted = {"rolecall.train.x": "from rolecall.metatrain.stages import run  # the meta-policy\n",
               "rolecall.train.y": "import rolecall.workflows.deliberation\n",
               "rolecall.train.z": '"""Generic."""\nNAME = "MetaPolicy"\n'}
    assert len(_train_layer_mentions(planted)) == 5  # 2 imports, 3 lines: the check is not vacuous
    train = {mod: path.read_text("utf-8") for mod, path in MODULES.items()
             if mod == "rolecall.train" or mod.startswith("rolecall.train.")}
    assert len(train) > 5 and _train_layer_mentions(train) == []


def test_modules_and_functions_have_a_readable_size():
    long_modules = [f"{m}: {n} lines" for m, p in MODULES.items()
                    if (n := len(p.read_text("utf-8").splitlines())) > MAX_MODULE_LINES]
    long_functions = [f"{m}.{node.name}: {node.end_lineno - node.lineno + 1} lines"
                      for m, tree in TREES.items() for node in ast.walk(tree)
                      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                      and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert long_modules + long_functions == []


def test_the_sandbox_scripts_import_no_rolecall_module():
    # They run without rolecall on the path; an import of it would fail inside the jail.
    for mod in (m for m in MODULES if STANDALONE.match(m)):
        assert not EDGES.get(mod), f"{mod} imports {EDGES[mod]}"


@pytest.mark.parametrize("rule", ["module cycle", "layer", "private"])
def test_the_checks_can_fail(rule):
    """Each rule catches a planted violation (the checks above are not vacuous)."""
    if rule == "module cycle":
        assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    elif rule == "layer":
        assert _layer("rolecall.types") < _layer("rolecall.train.loop")
    else:
        assert _private_imports({"rolecall.x": {("rolecall.y", "_hidden"), ("rolecall", "__version__")}}) == [
            "rolecall.x imports _hidden from rolecall.y"]


def _benchmark_edges() -> dict[str, set[tuple[str, str]]]:
    """benchmarks/*.py -> {(benchmark module or rolecall module, name imported)}."""
    root = SRC.parent / "benchmarks"
    out: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for path in sorted(root.glob("*.py")):
        for node in _imports(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                for a in node.names:
                    target = f"{node.module}.{a.name}" if node.module == "benchmarks" else node.module
                    out[path.stem].add((target, a.name))
            elif isinstance(node, ast.Import):
                out[path.stem] |= {(a.name, "") for a in node.names}
    return out


def test_benchmarks_are_clients():
    """Benchmarks use rolecall's public API or its documented measurement surface, import no
    `_private` name, and do not import each other in a cycle."""
    edges = _benchmark_edges()
    private = sorted(f"benchmarks/{m}.py imports {name} from {t}" for m, ts in edges.items() for t, name in ts
                     if (t.startswith(("rolecall", "benchmarks")) and name.startswith("_") and not name.startswith("__"))
                     or any(part.startswith("_") and part != "__future__" for part in t.split(".")))
    graph = {m: {t.split(".")[1] for t, _ in ts if t.startswith("benchmarks.")} for m, ts in edges.items()}
    assert private == [] and _cycles(graph) == []


def test_heavy_engines_stay_out_of_workflows_rewards_estimators_and_loss():
    heavy = ("transformers", "peft", "vllm", "ray", "torch.distributed")
    light = ("workflows", "rewards", "advantages", "loss", "tasks")
    found = sorted(f"{m} imports {a.name if isinstance(n, ast.Import) else n.module}"
                   for m, tree in TREES.items() if _package(m) in light
                   for n in _imports(tree)
                   for a in (n.names if isinstance(n, ast.Import) else [n])
                   if ((a.name if isinstance(n, ast.Import) else n.module) or "").split(".")[0] in heavy[:4]
                   or ((a.name if isinstance(n, ast.Import) else n.module) or "").startswith(heavy[4]))
    assert found == []


def test_function_local_imports_below_the_entry_points_say_why():
    """Below the entry points (CLI, API, export, grid) an import sits at the top of its module,
    unless a comment on its line says what import time it saves."""
    entry = LAYERS[-1]
    found = []
    for mod, tree in TREES.items():
        if _package(mod) in entry:
            continue
        lines = MODULES[mod].read_text("utf-8").splitlines()
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in _imports(fn):
                    if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("rolecall") \
                            and "#" not in lines[node.lineno - 1]:
                        found.append(f"{mod}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    assert found == []
