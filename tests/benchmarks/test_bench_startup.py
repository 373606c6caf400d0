"""The startup section is rendered from its stored sitting alone: the medians, the warm-load
verdict and the stale line follow the stored numbers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.benchmarks import _stored, bench_startup
from tests.benchmarks._scratch import render_stored

_CODE = ["tests/benchmarks/_stored.py"]


def _write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runs: list[dict[str, Any]],
           **extra: Any) -> str:
    """Store a sitting of ``runs`` in a temp store, render it into a temp report; the section."""
    data = {
        "command": bench_startup.COMMAND, "machine": "a CPU", "commit": "abc", "code": _CODE,
        "fingerprint": _stored.fingerprint(_CODE), "uncommitted": [],
        "started": "2026-11-30 03:00 UTC", "load_at_start": "0.6 / 0.3 / 0.4",
        "warm_starts": 3, "eval_rows": 8, "load_before": 0.6, "runs": runs, **extra,
    }
    return render_stored(tmp_path, monkeypatch, "startup", data, bench_startup.render)


def _runs(warm_loads: tuple[float, ...] = (2.5, 2.8, 2.0)) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = [
        {"step": "gguf", "load_s": 22.4, "import_s": 2.24, "load": 0.9},
        {"step": "cold", "load_s": 26.28, "import_s": 2.0, "load": 1.0},
    ]
    runs += [{"step": "warm", "repeat": i, "load_s": w, "import_s": 1.8 + i / 10, "load": 1.0}
             for i, w in enumerate(warm_loads)]
    runs.append({"step": "eval", "rows": 8, "wall_s": 18.94, "model_load_s": 3.1,
                 "summary": {"samples": 8, "passed": 5}, "load": 1.1})
    return runs


def test_startup_warm_median_and_target_come_from_the_stored_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _write(tmp_path, monkeypatch, _runs())
    assert "**stale**" not in text
    assert "| GGUF each start (`OSMOSIS_GGUF_CACHE=0`, the old path) | 22.40 | 2.24 |" in text
    assert "| cold: builds the converted-weights cache | 26.28 | 2.00 |" in text
    assert "| warm: reads the cache (median of 3) | 2.50 | 1.90 |" in text
    assert "Warm load against the GGUF path: 9.0x faster." in text
    assert "Target warm load < 3 s on 2 cores: **met** (2.50 s)." in text
    assert "over 8 rows, warm cache" in text and "**18.9 s** wall, 8 samples." in text
    assert "Load average (1 min) 0.6 before and 1.1 after" in text


def test_startup_target_not_met_on_a_slow_warm_median(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _write(tmp_path, monkeypatch, _runs((3.4, 2.0, 3.1)))
    assert "**NOT met** (3.10 s)" in text


def test_startup_interrupted_sitting_decides_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _write(tmp_path, monkeypatch, _runs()[:3])
    assert "**not decided** (1 of 3 warm starts stored)" in text
    assert "over 8 rows, warm cache" in text and "not measured" in text


def test_startup_changed_code_says_stale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = _write(tmp_path, monkeypatch, _runs(), fingerprint="0" * 16)
    assert "**stale**: the code this section measures" in text and "**met**" in text
