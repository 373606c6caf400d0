"""bench_update's section comes from its stored runs: the keep/remove verdict on each path (LoRA
layers in the base's precision, a group's prompt once) is computed per batch from the update
times paired by round."""

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


def _runs(
    ours_over_peft: dict[str, float], rounds: int = 3, ours_over_noshare: float = 0.8
) -> list[dict[str, Any]]:
    """peft's update 20 s (round 1 slow for every row), ours that times the ratio, the padded
    forward ours / ``ours_over_noshare``."""
    out = []
    for r in range(rounds):
        slow = 1.5 if r == 1 else 1.0
        for name, ratio in ours_over_peft.items():
            ours = 20.0 * slow * ratio
            took = {"ours": ours, "peft": 20.0 * slow, "noshare": ours / ours_over_noshare}
            for config in ("ours", "peft", "noshare"):
                out.append({"batch": name, "config": config, "round": r,
                            "update_s": [took[config], took[config] + 1.0],
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


def test_paths_that_save_over_ten_percent_on_every_batch_are_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _render(tmp_path, monkeypatch, _runs({"search": 0.8, "quickstart": 0.85}))
    assert "| search (kb step 4: 22 sequences, 9019 tokens, 1400 trained) | ours, the defaults: " \
        "LoRA layers in the base's precision under autocast, a group's prompt once | " \
        "16.50 [16.50-24.50] | 1.2e-02 / 3.1e-01 |" in text
    assert "(the library's default) | 20.50 [20.50-30.50] | - |" in text
    assert "- LoRA layers in the base's precision (`lora_compute`), search: ours / without, " \
        "paired by round: 0.80x, 0.80x, 0.80x; saves 20%: pays" in text
    assert "(`lora_compute`), quickstart: ours / without, paired by round: 0.85x, 0.85x, " \
        "0.85x; saves 15%" in text
    assert "- Verdict, LoRA layers in the base's precision (`lora_compute`): **pays** on " \
        "every batch: kept." in text
    assert "- Verdict, a group's prompt once (packed rows or cached keys and values, " \
        "`_prefix`): **pays** on every batch: kept." in text
    assert "**stale**" not in text and "`docs/benchmarks/update.json`" in text


def test_a_path_that_does_not_pay_on_one_batch_is_to_remove(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _render(tmp_path, monkeypatch, _runs({"search": 0.8, "quickstart": 0.95}))
    assert "quickstart: ours / without, paired by round: 0.95x, 0.95x, 0.95x; saves 5%: " \
        "does NOT pay (< 10 %)." in text
    assert "(`lora_compute`): does **NOT** pay on every batch: remove it." in text
    shared = _render(tmp_path, monkeypatch, _runs({"search": 0.8}, ours_over_noshare=0.95))
    assert "`_prefix`): does **NOT** pay on every batch: remove it." in shared


def test_runs_stored_before_the_shared_prompt_rows_still_render(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = [
        {**{k: v for k, v in run.items() if k != "config"}, "ours": run["config"] == "ours"}
        for run in _runs({"search": 0.8}) if run["config"] != "noshare"
    ]
    text = _render(tmp_path, monkeypatch, old)
    assert "(`lora_compute`): **pays** on every batch: kept." in text
    assert "`_prefix`)" not in text


def test_two_rounds_give_no_verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = _render(tmp_path, monkeypatch, _runs({"search": 0.8, "quickstart": 0.8}, rounds=2))
    assert "2 paired round(s): no verdict below 3" in text
    assert "**not decided**" in text and "remove" not in text
