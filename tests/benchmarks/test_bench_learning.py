"""The learning benchmark's transfer tables and targets (issue 40), from stored reports."""

from __future__ import annotations

from typing import Any

from tests.benchmarks.bench_learning import (
    TrainRun,
    heldout_sets,
    transfer_tables,
    transfer_targets,
)


def _set(name: str, warm: float, trained: float, low: float) -> dict[str, Any]:
    return {
        "name": name,
        "rows": 24,
        "models": [{"role": "warm", "pass_rate": warm}, {"role": "trained", "pass_rate": trained}],
        "pass_vs_warm": {"diff": trained - warm, "ci_low": low, "ci_high": 0.9},
    }


def _run(seed: int, phrasings: tuple[float, float, float], longer: float) -> TrainRun:
    report = {
        **_set("like-training", 0.3, 0.9, 0.4),
        "sets": [_set("phrasings", *phrasings), _set("longer", 0.1, longer, 0.1)],
    }
    return TrainRun(seed, f"r{seed}", "finished", 600.0, 900.0, [], heldout=report)


def test_each_file_of_a_report_in_order_and_an_old_report_as_one() -> None:
    report = _run(0, (0.2, 0.6, 0.1), 0.5).heldout
    assert [name for name, _ in heldout_sets(report)] == ["like-training", "phrasings", "longer"]
    assert [name for name, _ in heldout_sets({"rows": 24, "models": []})] == ["held-out"]
    assert heldout_sets(None) == []


def test_targets_need_every_file_and_a_clear_gain_on_new_wordings() -> None:
    assert transfer_targets(_run(0, (0.2, 0.6, 0.1), 0.5)) == {"every_file": True, "transfer": True}
    # A file under 0.5 fails the first; a gain whose CI reaches 0 fails the second.
    assert transfer_targets(_run(0, (0.2, 0.6, 0.0), 0.4)) == {
        "every_file": False,
        "transfer": False,
    }
    # +0.15 is under the +0.20 asked for, even with its CI above 0.
    assert transfer_targets(_run(0, (0.45, 0.6, 0.05), 0.5))["transfer"] is False


def test_tables_count_runs_per_file_and_label_runs_of_one_seed() -> None:
    text = transfer_tables([_run(0, (0.2, 0.6, 0.1), 0.5), _run(0, (0.3, 0.4, -0.1), 0.75)])
    row = next(line for line in text.splitlines() if line.startswith("| phrasings |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[3:] == ["0.250 (0.20–0.30)", "0.500 (0.40–0.60)", "1 of 2", "1 of 2", "1 of 2"]
    assert "| seed 0, run 1 |" in text and "| seed 0, run 2 |" in text
