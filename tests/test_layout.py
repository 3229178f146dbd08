"""The package's layout keeps its promises: rooms documented, imports running one way (no
circle, no room importing back up), readers of models apart from the training loop, DVC
stages depending on all the code they run, benchmarks and scripts apart from the tests and
each saying what it is for."""

from __future__ import annotations

import ast
from pathlib import Path

import yaml

from tests.helpers import ROOT

PACKAGE = ROOT / "src" / "multilab"


def test_every_room_says_what_it_does() -> None:
    rooms = [p for p in PACKAGE.iterdir() if p.is_dir() and not p.name.startswith("__")]
    assert {p.name for p in rooms} >= {"lab", "data", "spaces", "training", "evaluation",
                                        "reporting"}
    for room in rooms:
        init = room / "__init__.py"
        assert init.exists(), room
        source = init.read_text()
        assert source.startswith('"""') and len(source.split('"""')[1].split()) > 20, init


#: what reads model directories (evaluation, figures, the report) and never trains one
MODEL_READERS = ("multilab.evaluation.evaluate", "multilab.reporting.report",
                 "multilab.reporting.figures", "multilab.training.model_dir",
                 "multilab.evaluation.token_translation", "multilab.evaluation.lab_word_retrieval",
                 "multilab.evaluation.model_word_order", "multilab.evaluation.static_embeddings")


def test_readers_of_models_do_not_import_the_training_loop() -> None:
    """Evaluation, figures and the report read model directories through
    training.model_dir (and a study's inputs through training.training_data): importing them
    must not import training.train. Followed in the source (every import run at import time,
    each package's ``__init__`` on the way), as a fresh ``python -c 'import …'`` would import
    them, without the ten seconds of torch's start-up."""
    modules = _module_paths()
    imported: set[str] = set()
    waiting = list(MODEL_READERS)
    while waiting:
        name = waiting.pop()
        parts = name.split(".")
        for upto in range(1, len(parts) + 1):  # the packages on the way, then the module
            module = ".".join(parts[:upto])
            if module in modules and module not in imported:
                imported.add(module)
                waiting.extend(target for target in _imports(modules[module], eager=True)
                               if target in modules)
    assert set(MODEL_READERS) <= imported  # the walk found every reader
    assert "multilab.training.train" not in imported


def test_every_stage_depends_on_the_whole_package() -> None:
    """A stage runs more than its own module (cli, config, files, the registry); a list of
    modules misses the next import, so every stage depends on src/multilab."""
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    for name, stage in stages.items():
        code = [dep for dep in stage["deps"] if str(dep).startswith("src")]
        assert code == ["src/multilab"], (name, code)


def _run_at_import(tree: ast.Module) -> list[ast.AST]:
    """The statements Python runs when it imports a module: its top level (inside ``if``,
    ``try``, ``with`` and class bodies too), not function bodies nor ``if TYPE_CHECKING:``."""
    found: list[ast.AST] = []
    waiting: list[ast.AST] = list(tree.body)
    while waiting:
        node = waiting.pop()
        found.append(node)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            waiting.extend(node.orelse)
            continue
        waiting.extend(ast.iter_child_nodes(node))
    return found


def _imports(path: Path, eager: bool = False) -> set[str]:
    """The ``multilab`` modules a file imports, at its top or inside a function (a lazy import
    is a dependency all the same); ``eager``: only those imported when the file is."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in _run_at_import(tree) if eager else ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return {name for name in found if name.startswith("multilab.")}


def _module_paths() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its ``__init__.py``)."""
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _import_graph() -> dict[str, set[str]]:
    """Module → the package's modules it imports (``from pkg import module`` counts as the
    module, ``from module import name`` as the module)."""
    modules = _module_paths()
    graph = {}
    for name, path in modules.items():
        graph[name] = {target for target in _imports(path) if target in modules} - {name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One circle of ``graph`` (a list of nodes, the first repeated at the end), or []."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        path.pop()
        return []

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return []


def _room(module: str) -> str:
    """The room a module stands in: its folder under ``multilab`` (``data``, ``training``, …)
    or, for a module beside the folders, the module itself (``config``, ``resolve``, …)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def test_no_module_imports_in_a_circle() -> None:
    """Modules import each other in one direction only: a circle (A imports B, B imports A)
    means neither can be read, tested or moved without the other."""
    assert _cycle(_import_graph()) == []


def test_no_room_imports_back_up() -> None:
    """Rooms stand on floors: the registries and the schema at the bottom, the command line on
    top, every import running down. Rooms whose imports make a circle have no such order: one
    of them imports back up (``config`` importing ``data`` while ``data`` imports ``config``
    was one)."""
    rooms: dict[str, set[str]] = {}
    for module, targets in _import_graph().items():
        rooms.setdefault(_room(module), set()).update(
            _room(target) for target in targets if _room(target) != _room(module))
    assert _cycle(rooms) == []


def test_pipeline_code_never_calls_the_reference_definitions() -> None:
    """``evaluation/reference.py`` states the metrics one item at a time, for the tests and the
    benchmarks to hold the fast paths against; the pipeline itself must never use them."""
    users = [module for module, targets in _import_graph().items()
             if "multilab.evaluation.reference" in targets]
    assert users == []


def test_benchmarks_and_scripts_import_nothing_from_the_tests() -> None:
    """The tests may change freely: no benchmark or script depends on them."""
    for path in [*(ROOT / "benchmarks").glob("*.py"), *(ROOT / "scripts").glob("*.py")]:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = {node.module for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}
        names |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                  for alias in node.names}
        assert not any(name.split(".")[0] == "tests" for name in names), path


def test_every_script_says_what_it_is_for() -> None:
    """A script without its purpose at the top is a script nobody dares run or delete."""
    for path in [*(ROOT / "scripts").iterdir(), *(ROOT / "benchmarks").iterdir()]:
        if path.suffix == ".py":
            assert ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))), path
        elif path.suffix == ".sh":
            opening = path.read_text(encoding="utf-8").splitlines()[1:3]
            assert all(line.startswith("# ") for line in opening), path
