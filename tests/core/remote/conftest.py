"""Loading agent loops imports user modules (server.py, tools.py ...) and extends sys.path;
undo both after each test so tests cannot see each other's modules."""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

_USER_DIRS = (
    str(Path(__file__).resolve().parents[3] / "templates"),
    str(Path(tempfile.gettempdir()).resolve()),
)


@pytest.fixture(autouse=True)
def _isolate_imports() -> Iterator[None]:
    path = list(sys.path)
    modules = set(sys.modules)
    yield
    sys.path[:] = path
    for name in set(sys.modules) - modules:
        file = str(Path(getattr(sys.modules[name], "__file__", None) or "/").resolve())
        if file.startswith(_USER_DIRS):
            sys.modules.pop(name, None)
