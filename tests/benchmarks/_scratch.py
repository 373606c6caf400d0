"""Render a benchmark section from a made-up stored sitting, in a scratch store and report."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.benchmarks import _report, _stored

__all__ = ["render_stored"]


def render_stored(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    data: dict[str, Any] | None,
    render: Callable[[], None],
) -> str:
    """Write ``data`` as the stored sitting ``name`` (none when None), run ``render`` and return
    the scratch BENCHMARKS.md it wrote."""
    store = tmp_path / "store"
    store.mkdir(exist_ok=True)
    if data is not None:
        (store / f"{name}.json").write_text(json.dumps(data))
    monkeypatch.setattr(_stored, "STORE", store)
    monkeypatch.setattr(_report, "REPORT", tmp_path / "BENCHMARKS.md")
    render()
    return (tmp_path / "BENCHMARKS.md").read_text()
