"""bench_prompt_head's section comes from its stored runs: the keep/remove verdict on the shared
prompt head is computed from the walls paired by round."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.benchmarks import _stored, bench_prompt_head
from tests.benchmarks._scratch import render_stored

_CODE = ["tests/benchmarks/_stored.py"]


def _runs(plain_over_head: float, rounds: int = 3) -> list[dict[str, Any]]:
    """Head 40 s a round (round 1 slow for both rows: pairing keeps the ratio), plain
    ``plain_over_head`` times that."""
    out = []
    for r in range(rounds):
        slow = 2.0 if r == 1 else 1.0
        for head in (True, False) if r % 2 == 0 else (False, True):
            wall = 40.0 * slow * (1.0 if head else plain_over_head)
            out.append({"head": head, "round": r, "wall_s": wall, "prompt_tokens": 22944,
                        "completion_tokens": 1394 + r, "load": 0.1,
                        "fingerprint": _stored.fingerprint(_CODE)})
    return out


def _render(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runs: list[dict[str, Any]],
            **change: Any) -> str:
    data = {
        "command": bench_prompt_head.COMMAND, "machine": "a CPU", "commit": "abc",
        "code": _CODE, "uncommitted": [], "fingerprint": _stored.fingerprint(_CODE),
        "started": "2026-11-30 03:00 UTC", "load_at_start": "0.1", "rounds": 3,
        "conversations": 16, "requests": 64, "max_tokens": 32, "batch": 32, "dtype": "float32",
        "runs": runs, **change,
    }
    return render_stored(tmp_path, monkeypatch, "prompt_head", data, bench_prompt_head.render)


def test_a_head_that_saves_half_the_wall_pays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _render(tmp_path, monkeypatch, _runs(2.0))
    assert "64 requests (16 two-question" in text and "22944 prompt tokens in all" in text
    assert "(float32 here). 3 interleaved rounds" in text
    assert "| 40.00 [40.00-80.00] | 1395 |" in text and "| 80.00 [80.00-160.00] | 1395 |" in text
    assert "paired by round: 2.00x, 2.00x, 2.00x; the head saves 50% of the wall time: " \
        "pays (>= 10 %)." in text
    assert "**stale**" not in text and "`docs/benchmarks/prompt_head.json`" in text


def test_a_head_that_saves_under_ten_percent_is_to_remove(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _render(tmp_path, monkeypatch, _runs(1.05))
    assert "saves 5% of the wall time: does NOT pay (< 10 %): remove it." in text


def test_fewer_than_three_rounds_give_no_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = _runs(2.0)[:3]  # round 0 both rows, round 1 one row: one paired round
    text = _render(tmp_path, monkeypatch, runs)
    assert "paired by round: 2.00x; 1 paired round(s): no verdict below 3." in text
    assert "pays" not in text


def test_changed_code_makes_the_section_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _render(tmp_path, monkeypatch, _runs(2.0), fingerprint="0" * 16)
    assert "**stale**: the code this section measures" in text
