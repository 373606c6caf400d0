"""bench_adapters' section comes from its stored repetitions: medians, the overhead over the
fastest bare variant, and the 5 % target's verdict."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.benchmarks import _stored, bench_adapters
from tests.benchmarks._scratch import render_stored

_CODE = ["tests/benchmarks/_stored.py"]


def _reps(adapter_over_bare: float, reps: int = 3) -> list[dict[str, Any]]:
    """Bare Strands 20 ms, Agents 30 ms (rep 1 slower for all), the documented Strands setup
    5x; each adapter ``adapter_over_bare`` times its framework's bare variant; CPU = wall."""
    out = []
    for rep in range(reps):
        slow = 1.5 if rep == 1 else 1.0
        wall = {
            "strands_docs": 0.100 * slow,
            "strands_client": 0.020 * slow,
            "strands_adapter": 0.020 * slow * adapter_over_bare,
            "agents_bare": 0.030 * slow,
            "agents_adapter": 0.030 * slow * adapter_over_bare,
        }
        out.append({"rep": rep, "order": list(wall), "wall_s": wall, "cpu_s": wall,
                    "load": 0.1, "fingerprint": _stored.fingerprint(_CODE)})
    return out


def _render(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runs: list[dict[str, Any]],
            **change: Any) -> str:
    data = {
        "command": bench_adapters.COMMAND, "machine": "a CPU", "commit": "abc", "code": _CODE,
        "uncommitted": [], "fingerprint": _stored.fingerprint(_CODE),
        "started": "2026-11-30 03:00 UTC", "load_at_start": "0.1", "reps": 3, "turns": 5,
        "runs": runs, **change,
    }
    return render_stored(tmp_path, monkeypatch, "adapters", data, bench_adapters.render)


def test_adapters_within_five_percent_meet_the_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _render(tmp_path, monkeypatch, _reps(1.02))
    assert "A 5-turn tool rollout (4 tool calls, then the answer)" in text
    assert "3 interleaved repetitions per variant (shuffled" in text
    assert "| strands bare (client_args, as documented) | 100.0 | 100.0-150.0 | +400.0% " \
        "| 100.0 | +400.0% |" in text
    assert "| strands bare (shared client=) | 20.0 | 20.0-30.0 |  | 20.0 |  |" in text
    assert "| agents OsmosisAgent | 30.6 | 30.6-45.9 | +2.0% | 30.6 | +2.0% |" in text
    assert "**met** (median wall: Strands +2.0%, OpenAI Agents +2.0%)" in text
    assert "for every request: 5.0x the wall time of a shared client here." in text
    assert "**stale**" not in text and "`docs/benchmarks/adapters.json`" in text


def test_an_adapter_over_five_percent_fails_the_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _render(tmp_path, monkeypatch, _reps(1.08))
    assert "**NOT met** (median wall: Strands +8.0%, OpenAI Agents +8.0%)" in text


def test_too_few_repetitions_decide_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _render(tmp_path, monkeypatch, _reps(1.02, reps=1))
    assert "**not decided (1 repetition(s), 3 needed)**" in text
    assert "1 interleaved repetitions per variant (of 3: it ended early)" in text
    assert "| strands OsmosisStrandsAgent | 20.4 | - | +2.0% |" in text


def test_changed_code_makes_the_section_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _render(tmp_path, monkeypatch, _reps(1.02), fingerprint="0" * 16)
    assert "**stale**: the code this section measures" in text
