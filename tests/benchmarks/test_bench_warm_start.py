"""bench_warm_start's section comes from its stored runs: the keep/remove verdict on the shared
head is computed from the step times paired by round."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.benchmarks import _stored, bench_warm_start
from tests.benchmarks._scratch import render_stored

_CODE = ["tests/benchmarks/_stored.py"]


def _runs(plain_over_shared: float, rounds: int = 3) -> list[dict[str, Any]]:
    """Shared steps of 4 s (a slow first step: a run's figure is its median), round 1 slow for
    both rows; plain ``plain_over_shared`` times that; losses 1e-3 apart at most."""
    out = []
    for r in range(rounds):
        slow = 2.0 if r == 1 else 1.0
        for share in (True, False) if r % 2 == 0 else (False, True):
            step = 4.0 * slow * (1.0 if share else plain_over_shared)
            losses = [2.0, 1.5, 1.0, 0.5] if share else [2.0, 1.501, 1.0, 0.5]
            out.append({"share": share, "round": r, "step_s": [9.0 * step, step, step, step],
                        "losses": losses, "load": 0.1,
                        "fingerprint": _stored.fingerprint(_CODE)})
    return out


def _render(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runs: list[dict[str, Any]],
            **change: Any) -> str:
    data = {
        "command": bench_warm_start.COMMAND, "machine": "a CPU", "commit": "abc",
        "code": _CODE, "uncommitted": [], "fingerprint": _stored.fingerprint(_CODE),
        "started": "2026-11-30 03:00 UTC", "load_at_start": "0.1", "rounds": 3, "steps": 4,
        "batch": 8, "budget": 2048, "rank": 8, "lr": 1e-3, "dtype": "bfloat16",
        "tokens_mean": 347.2, "trained_mean": 43.4, "runs": runs, **change,
    }
    return render_stored(tmp_path, monkeypatch, "warm_start", data, bench_warm_start.render)


def test_a_shared_head_that_saves_over_half_the_step_pays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _render(tmp_path, monkeypatch, _runs(2.5))
    assert "347 tokens each on average, 43 of them trained), 4 steps per run" in text
    assert "(r 8, all linear layers), AdamW lr 0.001, micro-batches of at most 2048" in text
    assert "(bfloat16 here). 3 interleaved rounds" in text
    assert "the default) | 4.00 [4.00-8.00] |" in text and "forward) | 10.00 [10.00-20.00] |" in text
    assert "paired by round: 2.50x, 2.50x, 2.50x; the shared head saves 60% of the step: " \
        "pays (>= 10 %)." in text
    assert "over the runs' steps: 1.0e-03" in text
    assert "**stale**" not in text and "`docs/benchmarks/warm_start.json`" in text


def test_a_shared_head_that_saves_under_ten_percent_is_to_remove(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _render(tmp_path, monkeypatch, _runs(1.08))
    assert "saves 7% of the step: does NOT pay (< 10 %): remove it." in text


def test_fewer_than_three_rounds_give_no_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _render(tmp_path, monkeypatch, _runs(2.5, rounds=2))
    assert "2.50x, 2.50x; 2 paired round(s): no verdict below 3." in text and "pays" not in text


def test_changed_code_makes_the_section_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _render(tmp_path, monkeypatch, _runs(2.5), fingerprint="0" * 16)
    assert "**stale**: the code this section measures" in text
