"""bench_judge's section comes from its stored passes: rates, the cache's hit rate, whether
concurrent calls paid, and the injection table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.benchmarks import _injection, _stored, bench_judge
from tests.benchmarks._scratch import render_stored

_CODE = ["tests/benchmarks/_stored.py"]


def _pass(name: str, samples: int, wall: float, calls: int, hits: int) -> dict[str, Any]:
    return {"pass": name, "samples": samples, "wall_s": wall, "calls": calls, "hits": hits,
            "lookups": samples, "failed": 0, "prompt_tokens": 520 * calls,
            "completion_tokens": 23 * calls, "retries": 0, "load": 0.1,
            "fingerprint": _stored.fingerprint(_CODE)}


def _injection_scores() -> dict[str, dict[str, list[float | None]]]:
    """Raw paste: every injection passes; tagged: none does (one reply unreadable)."""
    n_bad = len(_injection.TOPICS) * len(_injection.BAD)
    out: dict[str, dict[str, list[float | None]]] = {}
    for prompt, injected in zip(_injection.PROMPTS, (1.0, 0.0), strict=True):
        scores: dict[str, list[float | None]] = {
            "good": [1.0] * len(_injection.TOPICS), "bad": [0.0] * n_bad
        }
        for name in _injection.INJECTIONS:
            scores[name] = [injected] * n_bad
        out[prompt] = scores
    out["tagged (now)"]["plea"][0] = None
    return out


def _passes(serial_wall: float) -> list[dict[str, Any]]:
    """100 calls in 100 s with 8 in flight; 16 calls in ``serial_wall`` s one at a time."""
    return [
        _pass("first", 100, 100.0, 100, 0),
        _pass("second", 100, 0.007, 0, 100),
        _pass("serial", 16, serial_wall, 16, 0),
        {"pass": "injection", "scores": _injection_scores(), "load": 0.1,
         "fingerprint": _stored.fingerprint(_CODE)},
    ]


def _render(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runs: list[dict[str, Any]],
            **change: Any) -> str:
    data = {
        "command": bench_judge.COMMAND, "machine": "a CPU", "commit": "abc", "code": _CODE,
        "uncommitted": [], "fingerprint": _stored.fingerprint(_CODE),
        "started": "2026-11-30 03:00 UTC", "load_at_start": "0.1", "samples": 100,
        "serial_samples": 16, "concurrent": 8, "max_tokens": 48, "load_1min_before": 0.2,
        "model_load_s": 6.2, "runs": runs, **change,
    }
    return render_stored(tmp_path, monkeypatch, "judge", data, bench_judge.render)


def test_concurrency_that_doubles_the_rate_pays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _render(tmp_path, monkeypatch, _passes(serial_wall=32.0))  # 0.5 calls/s alone
    assert "Model load:\n6.2 s (not counted). Nothing else was running" in text
    assert "| 1: first grading, 8 calls in flight | 100 | 100 (0 retries) | 520 + 23 | 100.0 s " \
        "| 1.00 | 1.00 | 0% | 0 |" in text
    assert "| 2: the same eval re-graded | 100 | 0 (0 retries) | - | 7 ms | 0.00 |" in text
    assert "| 3: first 16, 1 call in flight | 16 | 16 (0 retries) | 520 + 23 | 32.0 s | 0.50" in text
    assert "**Judge throughput: 1.00 calls/s** with 8 calls in flight,\n  2.0x the rate with " \
        "one call at a time (the engine batches them)." in text
    assert "0% on the first pass" in text and "100% when the same samples are graded again" in text
    assert "7 ms instead of 100 s and makes no judge call." in text
    assert "- 0 of 100 judgements failed" in text
    assert "| raw paste (before) | 10/10 | 20/20 (mean 0.00) | 20/20 (mean 1.00) " in text
    assert "**Verdict flip rate: 100% with the raw-paste prompt (60/60),\n  0% with the tagged " \
        "prompt (0/59)**" in text
    assert "**stale**" not in text and "`docs/benchmarks/judge.json`" in text


def test_concurrency_under_the_bar_says_it_did_not_pay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _render(tmp_path, monkeypatch, _passes(serial_wall=17.0))  # 0.94 calls/s alone
    assert "1.06x the rate with one call at a time: concurrency did not pay" in text


def test_an_interrupted_sitting_says_what_it_did_not_measure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _render(tmp_path, monkeypatch, _passes(32.0)[:2])
    assert "Not measured (the sitting ended before): 3: first 16, 1 call in flight." in text
    assert "Prompt injection: not measured" in text and "the rate with one call" not in text


def test_changed_code_makes_the_section_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _render(tmp_path, monkeypatch, _passes(32.0), fingerprint="0" * 16)
    assert "**stale**: the code this section measures" in text
