"""The runner section is rendered from its stored sitting alone: verdict, overheads and the
stale line follow the stored numbers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.benchmarks import _stored, bench_runner
from tests.benchmarks._scratch import render_stored

_CODE = ["tests/benchmarks/_stored.py"]


def _write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runs: list[dict[str, Any]],
           **extra: Any) -> str:
    """Store a sitting of ``runs`` in a temp store, render it into a temp report; the section."""
    data = {
        "command": bench_runner.COMMAND, "machine": "a CPU", "commit": "abc", "code": _CODE,
        "fingerprint": _stored.fingerprint(_CODE), "uncommitted": [],
        "started": "2026-11-30 03:00 UTC", "load_at_start": "0.2 / 0.3 / 0.4",
        "rollouts": 3000, "levels": [1, 100, 1000], "repeats": 3, "held_s": 0.5,
        "held_rollouts": 1000, "workers": [1, 4], "process_rollouts": 400, "runs": runs,
        **extra,
    }
    return render_stored(tmp_path, monkeypatch, "runner", data, bench_runner.render)


def _runs(local_wall: float = 0.15, held_ok: int = 1000) -> list[dict[str, Any]]:
    """Direct work 0.030 s best of 3 (0.010 ms per rollout); each level's best run
    ``local_wall``; one 0.5 s workflow run and two process runs."""
    runs: list[dict[str, Any]] = [
        {"row": "direct", "repeat": i, "rollouts": 3000, "wall_s": w}
        for i, w in enumerate((0.040, 0.030, 0.035))
    ]
    runs += [
        {"row": "local", "concurrency": c, "repeat": i, "rollouts": 3000,
         "wall_s": local_wall + i * 0.01, "ok": 3000, "peak_in_flight": c}
        for c in (1, 100, 1000) for i in range(3)
    ]
    runs.append({"row": "held", "concurrency": 1000, "rollouts": 1000, "workflow_s": 0.5,
                 "wall_s": 0.56, "ok": held_ok, "peak_in_flight": 1000})
    runs += [{"row": "process", "concurrency": w, "rollouts": 400, "wall_s": 0.2,
              "ok": 400, "peak_in_flight": w} for w in (1, 4)]
    return runs


def test_runner_overheads_and_target_come_from_the_stored_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _write(tmp_path, monkeypatch, _runs())
    assert "**stale**" not in text
    assert "without the runner (0.010 ms per rollout). Best of 3 runs" in text
    # best of 3 = 0.150 s over 3000 rollouts: 0.050 ms, minus 0.010 ms direct
    assert "| local | 100 | 3000 | 0.150 | 0.050 | 0.040 | 3000/3000 | 100 |" in text
    assert "| local, 0.5 s workflow | 1000 | 1000 | 0.560 | - | 0.060 | 1000/1000 | 1000 |" in text
    assert "| process (4 workers, warm) | 4 | 400 | 0.200 | 0.500 | 0.490 | 400/400 | 4 |" in text
    assert "at 1, 100 and 1000 concurrent; 1000 concurrent held without error): **met** " in text
    assert "(worst local overhead 0.040 ms)" in text
    assert "Median of the local rows' per-rollout time: 0.050 ms." in text


def test_runner_target_fails_on_slow_rows_or_a_failed_rollout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _write(tmp_path, monkeypatch, _runs(local_wall=6.0))  # 2 ms per rollout
    assert "**NOT met** (worst local overhead 1.990 ms)" in text
    text = _write(tmp_path, monkeypatch, _runs(held_ok=999))
    assert "**NOT met** (worst local overhead 0.040 ms)" in text and "999/1000" in text


def test_runner_interrupted_sitting_decides_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = [r for r in _runs() if r["row"] == "direct" or r.get("concurrency") == 1][:5]
    text = _write(tmp_path, monkeypatch, runs)
    assert "**not decided**" in text and "**met**" not in text and "NOT met" not in text
    assert "| local | 1 | 3000 | 0.150 |" in text and "| local | 100 |" not in text


def test_runner_changed_code_says_stale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = _write(tmp_path, monkeypatch, _runs(), fingerprint="0" * 16)
    assert "**stale**: the code this section measures" in text and "**met**" in text
