"""The layer rule: core never imports the trainer, and no package has an import cycle.

The trainer plugs its engines into core through the ``osmosis.engines`` entry points and is
launched as a subprocess; a direct import (even a lazy one inside a function) would make core
need torch and would let the layers grow back into each other.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {
    "osmosis_ai": ROOT / "core" / "osmosis_ai",
    "osmosis_trainer": ROOT / "trainer" / "osmosis_trainer",
    "osmosis_integrations": ROOT / "osmosis_integrations",
}
# Core modules still allowed to import the trainer while a move is under way (none now:
# ``osmosis train`` launches ``python -m osmosis_trainer.worker``).
PENDING: set[str] = set()
# Private core modules the trainer still reads while a public seam is being made (none now:
# the worker prints through ``osmosis_ai.console``).
PRIVATE_PENDING: set[tuple[str, str]] = set()


def _module_name(path: Path) -> str:
    for package, folder in PACKAGES.items():
        if path.is_relative_to(folder):
            parts = (package, *path.relative_to(folder).with_suffix("").parts)
            return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    raise AssertionError(path)


def _modules() -> dict[str, Path]:
    return {
        _module_name(p): p for folder in PACKAGES.values() for p in sorted(folder.rglob("*.py"))
    }


def _top_level(tree: ast.AST) -> list[ast.AST]:
    """Statements run at import time, including ``if``/``try`` bodies (``TYPE_CHECKING``
    imports count: a cycle that only type checkers follow is still a cycle)."""
    out: list[ast.AST] = []
    for node in ast.iter_child_nodes(tree):
        out.append(node)
        if isinstance(node, ast.If | ast.Try):
            out.extend(_top_level(node))
    return out


def _imports(tree: ast.AST, module: str, *, top_level_only: bool) -> set[str]:
    """Absolute names imported by ``tree`` (``from a import b`` yields ``a`` and ``a.b``)."""
    nodes = _top_level(tree) if top_level_only else ast.walk(tree)
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")[: -node.level] if node.level else []
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def test_core_never_imports_the_trainer_statically() -> None:
    offenders = {
        name: sorted(i for i in _imports(ast.parse(path.read_text()), name, top_level_only=False)
                     if i.split(".")[0] == "osmosis_trainer")
        for name, path in _modules().items()
        if name.startswith("osmosis_ai") and name not in PENDING
    }
    offenders = {k: v for k, v in offenders.items() if v}
    assert offenders == {}, f"core modules importing the trainer: {offenders}"


def test_core_imports_without_the_trainer_installed() -> None:
    """Every core module imports with ``osmosis_trainer`` made unimportable."""
    names = sorted(n for n in _modules() if n.startswith("osmosis_ai") and n not in PENDING)
    code = (
        "import importlib, sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'osmosis_trainer':\n"
        "            raise ImportError('blocked: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        f"for name in {names!r}:\n"
        "    if name.endswith('__main__'):\n"
        "        continue\n"
        "    importlib.import_module(name)\n"
        "print(sorted(m for m in sys.modules if m.startswith('osmosis_trainer')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "[]"


def test_trainer_and_adapters_use_only_core_public_modules() -> None:
    """Outside core, ``osmosis_ai`` is used through public modules (no ``_private`` part)."""
    offenders = []
    for name, path in _modules().items():
        if name.startswith("osmosis_ai"):
            continue
        for imported in _imports(ast.parse(path.read_text()), name, top_level_only=False):
            parts = imported.split(".")
            private = [p for p in parts[:-1] if p.startswith("_")]
            if parts[0] == "osmosis_ai" and private and (name, ".".join(parts[:-1])) not in PRIVATE_PENDING:
                offenders.append(f"{name} imports {imported}")
    assert offenders == [], offenders


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def _module_graph(*, lazy: bool = False) -> dict[str, set[str]]:
    """Module -> the project modules its top-level code imports (with ``lazy``, imports inside
    functions too; a submodule's implicit import of its parent package is not an edge)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        targets = {i for i in _imports(tree, name, top_level_only=not lazy) if i in modules}
        graph[name] = {t for t in targets if t != name and not name.startswith(t + ".")}
    return graph


# osmosis-ai 0.3's framework paths are faces over osmosis_integrations (which builds on
# osmosis_ai.rollout): a room of their own, which nothing else in osmosis_ai.rollout imports.
FACE_ROOMS = ("osmosis_ai.rollout.integrations",)


def _room(module: str) -> str:
    """A module's room: its subpackage (``osmosis_ai.rollout``, ``osmosis_trainer.loop``)."""
    for face in FACE_ROOMS:
        if module == face or module.startswith(face + "."):
            return face
    return ".".join(module.split(".")[:2])


def _room_graph(module_graph: dict[str, set[str]]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, targets in module_graph.items():
        graph.setdefault(_room(module), set()).update(
            _room(t) for t in targets if _room(t) != _room(module)
        )
    for targets in list(graph.values()):
        for t in targets:
            graph.setdefault(t, set())
    return graph


def test_no_import_cycles_between_modules() -> None:
    assert _cycles(_module_graph()) == []


def test_no_import_cycles_between_packages() -> None:
    """Subpackages (``osmosis_ai.rollout``, ``osmosis_ai.serving``, ``osmosis_trainer.loop``...)
    depend on each other one way only."""
    assert _cycles(_room_graph(_module_graph())) == []


def test_no_import_cycles_between_rooms_counting_lazy_imports() -> None:
    """An import inside a function is still an arrow: a room that reaches up into the room
    that uses it (``loop`` starting ``distributed``, which builds on ``loop``) hides a circle
    that only shows when that function runs."""
    assert _cycles(_room_graph(_module_graph(lazy=True))) == []


def test_no_import_cycles_between_modules_counting_lazy_imports() -> None:
    """Module by module, imports inside functions included: a low module that lazily imports
    one built on it (discovery reaching up into the backends that import discovery) is a
    circle inside a package that the room graph cannot see."""
    assert _cycles(_module_graph(lazy=True)) == []


def test_no_lazy_import_cycles_between_cli_commands() -> None:
    """CLI command modules share views through a third module, never by importing each other."""
    graph = _module_graph(lazy=True)
    cli = {m: {t for t in ts if t.startswith("osmosis_ai.cli")} for m, ts in graph.items()
           if m.startswith("osmosis_ai.cli")}
    assert _cycles(cli) == []


def test_graph_sees_type_checking_imports() -> None:
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from a.b import C\n")
    assert "a.b" in _imports(tree, "m", top_level_only=True)


def test_lazy_imports_count_for_rooms() -> None:
    tree = ast.parse("def f():\n    from osmosis_trainer.distributed import connect\n")
    assert "osmosis_trainer.distributed" not in _imports(tree, "m", top_level_only=True)
    assert "osmosis_trainer.distributed" in _imports(tree, "m", top_level_only=False)
    rooms = _room_graph({"p.a._x": {"p.b._y"}, "p.b._y": {"p.a"}, "p.a": set()})
    assert _cycles(rooms) == [["p.a", "p.b"]]


def test_cycle_finder_finds_cycles() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
