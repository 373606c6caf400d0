"""No product function over 80 lines (issue 28): a long function is several concerns that
have not been named yet. The allow-list names each one still over the limit with its length;
it may only shrink (a listed function that grew, or a new long one, fails), and an entry whose
function got short enough must be removed."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("core/osmosis_ai", "trainer/osmosis_trainer", "osmosis_integrations")
LIMIT = 80

# "path:qualified.name": its length now. Shrink these; never add to them.
ALLOWED: dict[str, int] = {}


def function_lengths(source: str) -> dict[str, int]:
    """Qualified name -> lines from ``def`` (decorators aside) to the function's last line."""
    found: dict[str, int] = {}

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                assert child.end_lineno is not None
                found[prefix + child.name] = child.end_lineno - child.lineno + 1
                walk(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                walk(child, f"{prefix}{child.name}.")

    walk(ast.parse(source), "")
    return found


def _long_functions() -> dict[str, int]:
    long: dict[str, int] = {}
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for name, lines in function_lengths(path.read_text(encoding="utf-8")).items():
                if lines > LIMIT:
                    long[f"{rel}:{name}"] = lines
    return long


def test_no_new_or_longer_long_functions() -> None:
    grown = {
        name: lines for name, lines in _long_functions().items()
        if lines > ALLOWED.get(name, LIMIT)
    }
    assert grown == {}, f"functions over {LIMIT} lines (split them by concern): {grown}"


def test_the_allow_list_only_names_functions_still_too_long() -> None:
    long = _long_functions()
    stale = sorted(name for name in ALLOWED if name not in long)
    assert stale == [], f"no longer over {LIMIT} lines: drop them from ALLOWED: {stale}"


def test_lengths_are_measured_from_def_to_the_last_line() -> None:
    source = "class A:\n    @staticmethod\n    def f():\n        x = 1\n        return x\n"
    assert function_lengths(source) == {"A.f": 3}
