"""The ray section is rendered from its stored sitting alone: the scaling verdict follows the
stored rates."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.benchmarks import _stored as _stored_mod
from tests.benchmarks import bench_ray
from tests.benchmarks._scratch import render_stored

CODE = ["tests/benchmarks/_stored.py"]


def _render(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: dict[str, Any]) -> str:
    return render_stored(tmp_path, monkeypatch, "ray", data, bench_ray.render)


def _sitting(four_workers: float) -> dict[str, Any]:
    """1 worker at 2.5 rollouts/s, 2 at 5.0, 4 at ``four_workers``."""
    def rollouts(
        io_s: float, backend: str, workers: int | None, n: int, rate: float
    ) -> dict[str, Any]:
        return {"part": "rollouts", "io_s": io_s, "backend": backend, "workers": workers,
                "rollouts": n, "ok": n, "rollouts_per_s": rate, "load": 1.0}

    runs = [
        rollouts(0.4, "in-process", None, 32, 2.4),
        rollouts(0.4, "ray 1 worker", 1, 32, 2.5),
        rollouts(0.4, "ray 2 workers", 2, 32, 5.0),
        rollouts(0.4, "ray 4 workers", 4, 32, four_workers),
        rollouts(0.0, "in-process", None, 200, 400.0),
        rollouts(0.0, "ray 4 workers", 4, 200, 250.0),
        {"part": "adapter_sync", "engines": 2, "sync_s": [0.009, 0.011, 0.008, 0.010, 0.012],
         "adapter_bytes": 80_000, "load": 1.0},
        {"part": "tiny_run", "setup": "one process", "step_s": [0.5, 0.4, 0.6],
         "rollout_s": [0.05, 0.04, 0.06], "load": 1.0},
        {"part": "tiny_run", "setup": "ray, 2 workers", "step_s": [0.6, 0.6, 0.6],
         "rollout_s": [0.07, 0.07, 0.07], "load": 1.0},
    ]
    return {
        "command": bench_ray.COMMAND,
        "machine": "a CPU",
        "commit": "abc",
        "code": CODE,
        "fingerprint": _stored_mod.fingerprint(CODE),
        "uncommitted": [],
        "started": "2026-12-01 10:00 UTC",
        "load_at_start": "1.0 / 1.0 / 1.0 (1 / 5 / 15 min) on 2 vCPUs",
        "io_s": 0.4,
        "n_scaling": 32,
        "n_overhead": 200,
        "sync_rounds": 5,
        "tiny_steps": 4,
        "tiny_rows": 16,
        "runs": runs,
    }


def test_ray_scaling_met_from_the_stored_rates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _render(tmp_path, monkeypatch, _sitting(9.5))
    assert "**stale**" not in text
    assert "| 0.4 s blocking I/O | ray 4 workers | 32 | 32 | 9.5 |" in text
    assert "| instant | ray 4 workers | 200 | 200 | 250.0 |" in text
    assert "4 workers vs 1 = 3.80x (target >= 3x: met); 2 workers vs 1 = 2.00x" in text
    # (1/250 - 1/400) s per rollout
    assert "instant workflow: +1.50 ms per rollout (400 vs 250 rollouts/s" in text
    assert "| tiny run (4 steps x 16 rollouts) |" in text
    assert "| one process | 0.50 | 0.05 |" in text and "| ray, 2 workers | 0.60 | 0.07 |" in text
    assert "tiny run: +0.10 s per step (1.20x" in text
    assert "0.08 MB adapter" in text and "median 10 ms over 5 steps" in text


def test_ray_scaling_not_met_and_stale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = _sitting(5.0)
    data["fingerprint"] = "0" * 16  # the measured code changed since
    text = _render(tmp_path, monkeypatch, data)
    assert "4 workers vs 1 = 2.00x (target >= 3x: NOT met)" in text
    assert "**stale**: the code this section measures" in text


def test_ray_interrupted_sitting_renders_what_it_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _sitting(9.5)
    data["runs"] = data["runs"][:3]  # stopped before 4 workers ran
    text = _render(tmp_path, monkeypatch, data)
    assert "Scaling: not every worker count has a stored run yet." in text
    assert "met" not in text and "Adapter sync" not in text
