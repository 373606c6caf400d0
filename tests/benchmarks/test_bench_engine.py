"""The engine section is rendered from its stored sitting alone: tokens/s, the scaling verdict
and the stale line follow the stored numbers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.benchmarks import _stored, bench_engine
from tests.benchmarks._scratch import render_stored

_CODE = ["tests/benchmarks/_stored.py"]


def _write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runs: list[dict[str, Any]],
           **extra: Any) -> str:
    """Store a sitting of ``runs`` in a temp store, render it into a temp report; the section."""
    data = {
        "command": bench_engine.COMMAND, "machine": "a CPU", "commit": "abc", "code": _CODE,
        "fingerprint": _stored.fingerprint(_CODE), "uncommitted": [],
        "started": "2026-11-30 03:00 UTC", "load_at_start": "0.2 / 0.3 / 0.4",
        "threads": 1, "params": 2_720_000, "hidden": 256, "layers": 4, "heads": 4,
        "new_tokens": 32, "requests": 64, "levels": [1, 8, 32], "max_batch_size": 32,
        "temperature": 1.0, "runs": runs, **extra,
    }
    return render_stored(tmp_path, monkeypatch, "engine", data, bench_engine.render)


def _runs(top_wall: float) -> list[dict[str, Any]]:
    """2000 tokens per level: 8 s at 1 (250 tokens/s), 2 s at 8, ``top_wall`` at 32."""
    return [
        {"concurrency": c, "wall_s": wall, "tokens": 2000, "latencies_s": [lat, lat * 3]}
        for c, wall, lat in ((1, 8.0, 0.1), (8, 2.0, 0.15), (32, top_wall, 0.2))
    ]


def test_engine_scaling_target_met_from_the_stored_levels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _write(tmp_path, monkeypatch, _runs(top_wall=0.5))
    assert "**stale**" not in text
    assert "| 1 | 250 | 1.0x | 200 ms | 2000 |" in text
    assert "| 8 | 1000 | 4.0x | 300 ms | 2000 |" in text
    assert "| 32 | 4000 | 16.0x | 400 ms | 2000 |" in text
    assert "32 concurrent vs 1: **16.0x** (target >= 4x: met)." in text
    assert "(1 torch threads)" in text and "2.72M parameters" in text


def test_engine_scaling_target_not_met_below_four_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _write(tmp_path, monkeypatch, _runs(top_wall=2.5))  # 800 tokens/s: 3.2x
    assert "32 concurrent vs 1: **3.2x** (target >= 4x: NOT met)." in text


def test_engine_interrupted_sitting_decides_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _write(tmp_path, monkeypatch, _runs(top_wall=0.5)[:2])
    assert "32 concurrent vs 1: not decided" in text and "| 32 |" not in text


def test_engine_changed_code_says_stale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = _write(tmp_path, monkeypatch, _runs(top_wall=0.5), fingerprint="0" * 16)
    assert "**stale**: the code this section measures" in text
