"""bench_update's section comes from its stored runs: the keep/remove verdict on LoRA layers in
the base's precision is computed per batch from the update times paired by round."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.benchmarks import _stored, bench_update
from tests.benchmarks._scratch import render_stored

_CODE = ["tests/benchmarks/_stored.py"]
_BATCHES = {
    "search": {"source": "kb step 4", "sequences": 22, "tokens": 9019, "trained": 1400},
    "quickstart": {"source": "calc step 4", "sequences": 4, "tokens": 3022, "trained": 700},
}


def _runs(ours_over_peft: dict[str, float], rounds: int = 3) -> list[dict[str, Any]]:
    """peft's update 20 s (round 1 slow for both rows), ours that times the ratio."""
    out = []
    for r in range(rounds):
        slow = 1.5 if r == 1 else 1.0
        for name, ratio in ours_over_peft.items():
            for ours in (True, False) if r % 2 == 0 else (False, True):
                took = 20.0 * slow * (ratio if ours else 1.0)
                out.append({"batch": name, "ours": ours, "round": r,
                            "update_s": [took, took + 1.0],
                            "load": 0.1, "fingerprint": _stored.fingerprint(_CODE)})
    return out


def _render(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runs: list[dict[str, Any]]) -> str:
    data = {
        "command": bench_update.COMMAND, "machine": "a CPU", "commit": "abc", "code": _CODE,
        "uncommitted": [], "fingerprint": _stored.fingerprint(_CODE),
        "started": "2026-12-01 02:00 UTC", "load_at_start": "0.1", "rounds": 3, "updates": 2,
        "budget": 2048, "rank": 8, "dtype": "bfloat16", "batches": _BATCHES, "runs": runs,
        "logprob_diff": {"search": {"mean": 0.012, "max": 0.31},
                         "quickstart": {"mean": 0.009, "max": 0.2}},
    }
    return render_stored(tmp_path, monkeypatch, "update", data, bench_update.render)


def test_layers_that_save_over_ten_percent_on_every_batch_are_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _render(tmp_path, monkeypatch, _runs({"search": 0.8, "quickstart": 0.85}))
    assert "| search (kb step 4: 22 sequences, 9019 tokens, 1400 trained) | LoRA layers in " \
        "the base's precision under autocast (ours, the default) | 16.50 [16.50-24.50] | " \
        "1.2e-02 / 3.1e-01 |" \
        in text
    assert "(the library's default) | 20.50 [20.50-30.50] | - |" in text
    assert "- search: ours / peft's, paired by round: 0.80x, 0.80x, 0.80x; saves 20%: pays" in text
    assert "- quickstart: ours / peft's, paired by round: 0.85x, 0.85x, 0.85x; saves 15%" in text
    assert "**pay** on every batch: kept." in text
    assert "**stale**" not in text and "`docs/benchmarks/update.json`" in text


def test_layers_that_do_not_pay_on_one_batch_are_to_remove(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _render(tmp_path, monkeypatch, _runs({"search": 0.8, "quickstart": 0.95}))
    assert "- quickstart: ours / peft's, paired by round: 0.95x, 0.95x, 0.95x; saves 5%: " \
        "does NOT pay (< 10 %)." in text
    assert "do **NOT** pay on every batch: remove `lora_compute`." in text


def test_two_rounds_give_no_verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = _render(tmp_path, monkeypatch, _runs({"search": 0.8, "quickstart": 0.8}, rounds=2))
    assert "2 paired round(s): no verdict below 3" in text
    assert "**not decided**" in text and "remove" not in text
