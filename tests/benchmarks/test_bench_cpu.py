"""bench_cpu's section comes from its stored rounds: the kernels named, the table's figures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.benchmarks import _report, _stored, bench_cpu
from tests.benchmarks._scratch import render_stored

_CODE = ["tests/benchmarks/_stored.py"]
_SHAPE = {"label": "MLP up (2x3 @ 3x5)", "m": 2, "k": 3, "n": 5, "batch": 0}  # 60 flops


def _round(r: int, slow: float = 1.0) -> dict[str, Any]:
    """fp32 takes 2 s (1 thread) / 1 s (2 threads), bf16 half that: bf16 2x faster."""
    times = [
        {"shape": _SHAPE["label"], "dtype": dtype, "threads": threads, "s": base / threads * slow}
        for threads in (2, 1)
        for dtype, base in (("fp32", 2e-9), ("bf16", 1e-9))
    ]
    return {"round": r, "times": times, "load": 0.1, "fingerprint": _stored.fingerprint(_CODE)}


def _render(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runs: list[dict[str, Any]],
            **change: Any) -> str:
    data = {
        "command": bench_cpu.COMMAND, "machine": "a CPU", "commit": "abc", "code": _CODE,
        "uncommitted": [], "fingerprint": _stored.fingerprint(_CODE),
        "started": "2026-11-30 03:00 UTC", "load_at_start": "0.1", "rounds": 3,
        "budget_s": 0.15, "shapes": [_SHAPE], "onednn": "AVX512 (isa)", "mkl": "MKL path",
        "runs": runs, **change,
    }
    return render_stored(tmp_path, monkeypatch, "cpu", data, bench_cpu.render)


def test_cpu_section_is_computed_from_the_stored_rounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _render(tmp_path, monkeypatch, [_round(0), _round(1, slow=2.0), _round(2)])
    assert "oneDNN: AVX512 (isa)." in text and "MKL's code path here: MKL path." in text
    assert "over 3 interleaved rounds;" in text and "~0.15 s of calls" in text
    # 60 flops in 1 ns (fp32, 2 threads) = 60 GFLOP/s; the slow round gives 30.
    row = "| MLP up (2x3 @ 3x5) | 60 [30-60] | 120 [60-120] | 2.00 [2.00-2.00]x "
    assert row + "| 2.00 [2.00-2.00]x | 2.00 [2.00-2.00]x |" in text
    assert "**stale**" not in text and "`docs/benchmarks/cpu.json`" in text


def test_cpu_section_says_stale_and_short(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = _render(tmp_path, monkeypatch, [_round(0)], fingerprint="0" * 16)
    assert "**stale**: the code this section measures" in text
    assert "over 1 interleaved rounds (of 3: the sitting ended early)" in text


def test_cpu_without_a_sitting_says_how_to_make_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_stored, "STORE", tmp_path / "store")
    monkeypatch.setattr(_report, "REPORT", tmp_path / "BENCHMARKS.md")
    bench_cpu.render()
    assert "it stores `docs/benchmarks/cpu.json`" in (tmp_path / "BENCHMARKS.md").read_text()
