"""The remote section is rendered from its stored sitting alone: each burst's row, the
sequential admission percentiles and the stale line follow the stored numbers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.benchmarks import _stored, bench_remote
from tests.benchmarks._scratch import render_stored

_CODE = ["tests/benchmarks/_stored.py"]


def _write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runs: list[dict[str, Any]],
           **extra: Any) -> str:
    """Store a sitting of ``runs`` in a temp store, render it into a temp report; the section."""
    data = {
        "command": bench_remote.COMMAND, "machine": "a CPU", "commit": "abc", "code": _CODE,
        "fingerprint": _stored.fingerprint(_CODE), "uncommitted": [],
        "started": "2026-11-30 03:00 UTC", "load_at_start": "0.2 / 0.3 / 0.4",
        "rollouts": 1000, "deadline_s": 600, "sequential": 200, "max_concurrent": 200,
        "client_timeout_s": 0.3, "explode_every": 20, "runs": runs, **extra,
    }
    return render_stored(tmp_path, monkeypatch, "remote", data, bench_remote.render)


def _burst(fault_rate: float, hold_s: float, p50: float, problems: list[str]) -> dict[str, Any]:
    faults = {"llm_500": 119, "llm_hang": 115, "callback_500": 47, "callback_hang": 61}
    return {
        "kind": "burst", "fault_rate": fault_rate, "hold_s": hold_s, "load": 0.7,
        "summary": {
            "rollouts": 1000, "admitted": 1000, "completed": 950, "errored": 50,
            "recovered_from_status_route": 0, "duplicate_callbacks": 61 if fault_rate else 0,
            "admission_p50_ms": p50, "admission_p99_ms": p50 + 40.4, "admission_mean_ms": p50,
            "wall_s": 9.0, "rollouts_per_s": 111.1,
            "faults_injected": faults if fault_rate else dict.fromkeys(faults, 0),
            "problems": problems,
        },
    }


def _runs(problems: list[str] | None = None) -> list[dict[str, Any]]:
    return [
        _burst(0.0, 20.0, 627.2, []),
        _burst(0.0, 0.0, 1100.4, []),
        _burst(0.1, 0.0, 1016.0, problems or []),
        # 200 sequential inits of 1..200 ms (out of order): p50 101, p99 198
        {"kind": "sequential", "admission_ms": [float(200 - i) for i in range(200)],
         "load": 0.5},
    ]


def test_remote_rows_and_percentiles_come_from_the_stored_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _write(tmp_path, monkeypatch, _runs())
    assert "**stale**" not in text
    assert "| admission only (loops held 20 s) | 1000 | 1000 | 627 | 668 | - | 950 | 50 | " in text
    assert "| no faults | 1000 | 1000 | 1100 | 1141 | 111.1 | 950 | 50 | 0/0 | 0/0 | 0 | 0 | none |" in text
    assert "| 10% faults | 1000 | 1000 | 1016 | 1056 | 111.1 | 950 | 50 | 119/115 | 47/61 | 61 | 0 | none |" in text
    assert "(200 in a row, each on a fresh connection" in text
    assert "admission p50 101.0 ms, p99 198.0 ms" in text
    assert "`max_concurrent_rollouts=200`" in text and "3x the 0.3 s client timeout" in text
    assert "1-minute load average after the last run: 0.5." in text
    assert "every loop sleeps 20 s before its first LLM call" in text


def test_remote_problems_and_a_missing_sequential_run_are_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _write(tmp_path, monkeypatch, _runs(["3 rollouts lost"])[:3])
    assert "| 0 | 3 rollouts lost |" in text
    assert "One init at a time: not measured" in text


def test_remote_changed_code_says_stale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = _write(tmp_path, monkeypatch, _runs(), fingerprint="0" * 16)
    assert "**stale**: the code this section measures" in text
