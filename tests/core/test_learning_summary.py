"""The end-screen summary of a training run: first vs last reward over windows of steps."""

from __future__ import annotations

import math

import pytest

from osmosis_ai.learning import HeldOut, format_summary, heldout_lines, summarize_learning


def _records(rewards: list[float]) -> list[dict[str, object]]:
    return [{"kind": "train", "step": i + 1, "reward_mean": r} for i, r in enumerate(rewards)]


def test_means_of_first_and_last_three_steps() -> None:
    s = summarize_learning(_records([0.1, 0.2, 0.3, 0.5, 0.6, 0.7, 0.8]))
    assert s is not None
    assert (s.steps, s.window) == (7, 3)
    assert s.first == pytest.approx(0.2)
    assert s.last == pytest.approx(0.7)
    assert s.change == pytest.approx(0.5)


def test_validation_records_and_missing_rewards_are_skipped() -> None:
    records = _records([0.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    records.insert(2, {"kind": "eval", "step": 2, "val_reward_mean": 0.9})
    records.insert(4, {"kind": "train", "step": 3, "reward_mean": math.nan})
    s = summarize_learning(records)
    assert s is not None
    assert s.steps == 6
    assert (s.first, s.last) == (0.0, 1.0)
    assert s.validation == (0.9, 0.9, 1)
    assert format_summary(s)[1] == "validation reward: 0.900 (1 evaluation)"


def test_short_runs_use_non_overlapping_windows() -> None:
    s = summarize_learning(_records([0.2, 0.4, 0.9]))
    assert s is not None
    assert s.window == 1
    assert (s.first, s.last) == (0.2, 0.9)
    one = summarize_learning(_records([0.3]))
    assert one is not None and one.change == 0.0
    assert summarize_learning([]) is None
    assert summarize_learning([{"kind": "eval", "val_reward_mean": 1.0}]) is None


def test_format_names_the_change_and_the_held_out_verdict() -> None:
    held = HeldOut(base=0.2, trained=0.45, ci_low=0.1, ci_high=0.4, rows=12)
    s = summarize_learning(_records([0.1, 0.1, 0.1, 0.4, 0.4, 0.4]), held_out=held)
    assert s is not None
    lines = format_summary(s)
    assert lines[0] == "reward: first 3 steps 0.100 → last 3 steps 0.400 (+0.300 over 6 steps)"
    assert "base 0.200 → trained 0.450 (+0.250" in lines[1]
    assert lines[1].endswith("better)")
    unclear = HeldOut(base=0.2, trained=0.25, ci_low=-0.05, ci_high=0.15, rows=12)
    s2 = summarize_learning(_records([0.1, 0.2]), held_out=unclear)
    assert s2 is not None
    assert format_summary(s2)[1].endswith("no clear change)")


def test_heldout_lines_show_each_model_and_the_paired_pass_differences() -> None:
    def model(role: str, rate: float, calls: float) -> dict[str, object]:
        return {"role": role, "pass_rate": rate, "tool_call_rate": min(calls, 1.0),
                "tool_calls_per_rollout": calls, "turns_per_rollout": calls + 1}

    report = {
        "rows": 32, "diff": 0.3,
        "models": [model("base", 0.031, 0.0), model("warm", 0.125, 1.0), model("trained", 0.5, 2.1)],
        "pass_vs_warm": {"diff": 0.375, "ci_low": 0.25, "ci_high": 0.5},
        "pass_vs_base": {"diff": 0.469, "ci_low": -0.01, "ci_high": 0.6},
    }
    lines = heldout_lines(report)
    assert lines[0] == "held-out, 32 rows:"
    assert lines[2].split() == ["base", "0.031", "0%", "0.00", "1.00"]
    assert lines[3].split() == ["warm", "start", "0.125", "100%", "1.00", "2.00"]
    assert lines[4].split() == ["trained", "0.500", "100%", "2.10", "3.10"]
    assert lines[5] == (
        "  trained vs warm start: pass rate +0.375, 95% CI [+0.250, +0.500] (better)"
    )
    assert lines[6].endswith("(no clear change)")
    # An older report (the reward comparison alone) and no report give no lines.
    assert heldout_lines({"rows": 5, "diff": 0.1}) == [] and heldout_lines(None) == []


def test_heldout_lines_give_each_named_file_its_own_block() -> None:
    def block(name: str, rows: int, trained: float) -> dict[str, object]:
        return {
            "name": name, "dataset": f"calc_heldout_{name}.jsonl", "rows": rows,
            "models": [{"role": "warm", "pass_rate": 0.25}, {"role": "trained", "pass_rate": trained}],
            "pass_vs_warm": {"diff": trained - 0.25, "ci_low": 0.05, "ci_high": 0.6},
        }

    report = {**block("seen", 24, 0.9), "sets": [block("phrasings", 16, 0.5), block("longer", 8, 0.25)]}
    lines = heldout_lines(report)
    headers = [line for line in lines if line.startswith("held-out")]
    assert headers == [
        "held-out seen (calc_heldout_seen.jsonl), 24 rows:",
        "held-out phrasings (calc_heldout_phrasings.jsonl), 16 rows:",
        "held-out longer (calc_heldout_longer.jsonl), 8 rows:",
    ]
    # Each block has its own models and its own paired difference, in order.
    trained = [line.split()[1] for line in lines if line.split()[0] == "trained" and "vs" not in line]
    assert trained == ["0.900", "0.500", "0.250"]
    diffs = [line for line in lines if "trained vs warm start" in line]
    assert [d.split()[6] for d in diffs] == ["+0.650,", "+0.250,", "+0.000,"]
