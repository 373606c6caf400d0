"""The eval section is rendered from its stored sitting alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.benchmarks import _stored as _stored_mod
from tests.benchmarks import bench_eval
from tests.benchmarks._scratch import render_stored

CODE = ["tests/benchmarks/_stored.py"]


def _render(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: dict[str, Any] | None) -> str:
    return render_stored(tmp_path, monkeypatch, "eval", data, bench_eval.render)


def _sitting(**run: Any) -> dict[str, Any]:
    summary = {
        "success": 19,
        "failed": 1,
        "skipped": 0,
        "failures_by_reason": {"timeout": 1},
        "reward": {"mean": 0.25},
        "pass_rate": 0.2,
        "prompt_tokens": 10119,
        "completion_tokens": 1223,
        "latency_ms": {"mean": 4800.0, "p50": 4600.0, "p95": 7800.0, "max": 12100.0},
        "wall_time_s": 13.8,
    }
    return {
        "command": bench_eval.COMMAND,
        "machine": "a CPU",
        "commit": "abc",
        "code": CODE,
        "fingerprint": _stored_mod.fingerprint(CODE),
        "uncommitted": [],
        "started": "2026-12-01 10:00 UTC",
        "ended": "2026-12-01 10:01 UTC",
        "load_at_start": "0.1 / 0.1 / 0.1 (1 / 5 / 15 min) on 2 vCPUs",
        "rows": 20,
        "runs": [
            {
                "rows": 20,
                "concurrency": 8,
                "concurrency_from": "default",
                "max_tokens": 64,
                "wall_s": 22.34,
                "load_start": 0.12,
                "load_end": 0.59,
                "model_load_s": 5.5,
                "summary": summary,
                "at": "2026-12-01 10:01 UTC",
                "load": 0.59,
                "fingerprint": _stored_mod.fingerprint(CODE),
                **run,
            }
        ],
    }


def test_eval_section_shows_the_stored_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = _render(tmp_path, monkeypatch, _sitting())
    assert "**stale**" not in text and "raw runs: `docs/benchmarks/eval.json`" in text
    assert "over 20 rows" in text and "concurrency 8 (the default), `max_tokens` 64" in text
    assert "| wall time, end to end | 22.3 s |" in text
    assert "| eval time after the model is up | 13.8 s |" in text
    assert "| samples: success / failed / skipped | 19 / 1 / 0 |" in text
    assert "| failures by reason | timeout 1 |" in text
    assert "| mean reward / pass rate | 0.250 / 20% |" in text
    assert "| rollout latency mean / p50 / p95 / max | 4.8 / 4.6 / 7.8 / 12.1 s |" in text
    assert "| 1-min load average at start / end | 0.12 / 0.59 |" in text
    assert "- Date: 2026-12-01 10:00 UTC to 2026-12-01 10:01 UTC" in text


def test_eval_section_follows_the_flag_and_says_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _sitting(concurrency=2, concurrency_from="flag", rows=5)
    data["fingerprint"] = "0" * 16  # the measured code changed since
    text = _render(tmp_path, monkeypatch, data)
    assert "over 5 rows" in text and "concurrency 2 (`--concurrency`)" in text
    assert "**stale**: the code this section measures" in text


def test_eval_without_a_sitting_says_how_to_make_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _render(tmp_path, monkeypatch, None)
    assert "it stores `docs/benchmarks/eval.json`" in text
