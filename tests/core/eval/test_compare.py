"""The paired bootstrap and the pairing of two eval runs' records by row."""

from __future__ import annotations

import random
import statistics
from typing import Any

import pytest

from osmosis_ai.eval import EvalRecord, compare_records, paired_bootstrap, row_rewards


def _rec(row: int, reward: float | None, *, run: int = 0, status: str = "success") -> EvalRecord:
    return EvalRecord(
        row_index=row,
        source_row_index=row,
        run_index=run,
        rollout_id=f"r{row}-{run}",
        status=status,  # type: ignore[arg-type]
        reward=reward,
    )


def test_mean_difference_is_exact_and_the_interval_contains_it() -> None:
    cand = [1.0, 0.5, 1.0, 0.0, 1.0]
    base = [0.0, 0.5, 1.0, 0.0, 0.0]
    diff, low, high = paired_bootstrap(cand, base, resamples=500, seed=1)
    assert diff == pytest.approx(0.4)
    assert low <= diff <= high
    # Every resampled mean lies between the smallest and largest paired difference.
    assert 0.0 <= low and high <= 1.0


def test_same_seed_same_interval_other_seed_other_interval() -> None:
    rng = random.Random(7)
    cand = [rng.random() for _ in range(30)]
    base = [rng.random() for _ in range(30)]
    assert paired_bootstrap(cand, base, seed=3) == paired_bootstrap(cand, base, seed=3)
    assert paired_bootstrap(cand, base, seed=3)[1:] != paired_bootstrap(cand, base, seed=4)[1:]


def test_identical_models_give_a_zero_width_interval_at_zero() -> None:
    values = [0.1, 0.9, 0.4, 0.4]
    assert paired_bootstrap(values, values) == (0.0, 0.0, 0.0)


def test_a_constant_gain_is_certain_however_noisy_the_rows() -> None:
    """Pairing removes the row-to-row variance: base varies wildly, the gain is always 0.1."""
    rng = random.Random(0)
    base = [rng.random() * 0.9 for _ in range(12)]
    cand = [b + 0.1 for b in base]
    diff, low, high = paired_bootstrap(cand, base)
    assert diff == pytest.approx(0.1)
    assert low == pytest.approx(0.1) and high == pytest.approx(0.1)


def test_interval_width_matches_the_standard_error() -> None:
    """For many rows the 95% percentile interval is about mean +- 1.96 standard errors."""
    rng = random.Random(11)
    diffs = [rng.gauss(0.2, 1.0) for _ in range(400)]
    zeros = [0.0] * len(diffs)
    diff, low, high = paired_bootstrap(diffs, zeros, resamples=4000, seed=5)
    se = statistics.stdev(diffs) / len(diffs) ** 0.5
    assert (high - low) == pytest.approx(2 * 1.96 * se, rel=0.1)
    assert (low + high) / 2 == pytest.approx(diff, abs=0.2 * se)


def test_no_difference_has_an_interval_around_zero() -> None:
    rng = random.Random(2)
    cand = [float(rng.random() < 0.5) for _ in range(60)]
    base = [float(rng.random() < 0.5) for _ in range(60)]
    _, low, high = paired_bootstrap(cand, base, seed=9)
    assert low < 0 < high


@pytest.mark.parametrize(
    ("cand", "base", "kw", "message"),
    [
        ([1.0], [1.0, 2.0], {}, "same length"),
        ([], [], {}, "at least one pair"),
        ([1.0], [0.0], {"resamples": 0}, "resamples"),
        ([1.0], [0.0], {"confidence": 1.0}, "confidence"),
    ],
)
def test_bad_arguments(
    cand: list[float], base: list[float], kw: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        paired_bootstrap(cand, base, **kw)


def test_rows_average_their_graded_samples_and_skip_failures() -> None:
    records = [
        _rec(0, 1.0, run=0),
        _rec(0, 0.0, run=1),
        _rec(1, None, status="failed"),
        _rec(2, 0.25),
        _rec(2, None, run=1, status="failed"),
    ]
    assert row_rewards(records) == {0: 0.5, 2: 0.25}


def test_compare_pairs_rows_and_reports_what_it_left_out() -> None:
    cand = [_rec(0, 1.0), _rec(1, 1.0), _rec(2, 1.0), _rec(3, None, status="failed")]
    base = [_rec(0, 0.0), _rec(1, 0.0), _rec(2, 1.0), _rec(3, 0.0)]
    cmp = compare_records(cand, base, candidate_name="run:2", baseline_name="embedded")
    assert cmp.rows == 3 and cmp.unpaired_rows == 1
    assert cmp.candidate_mean == pytest.approx(1.0)
    assert cmp.baseline_mean == pytest.approx(1 / 3)
    assert cmp.diff == pytest.approx(2 / 3)
    assert cmp.candidate_failed == 1 and cmp.baseline_failed == 0
    # Three rows: a resample of only the tied row (1 in 27) is at 0, so 0 is in the interval.
    assert cmp.ci_low == 0.0 and cmp.ci_high == pytest.approx(1.0)
    assert cmp.verdict == "no clear difference"


def test_verdicts_with_enough_rows() -> None:
    cand = [_rec(i, 1.0 if i % 8 else 0.0) for i in range(40)]
    base = [_rec(i, 1.0 if i % 4 == 1 else 0.0) for i in range(40)]
    better = compare_records(cand, base, candidate_name="a", baseline_name="b")
    assert better.diff == pytest.approx(0.625) and better.verdict == "better"
    worse = compare_records(base, cand, candidate_name="b", baseline_name="a")
    assert worse.diff == pytest.approx(-0.625) and worse.verdict == "worse"


def test_compare_without_common_rows_has_no_interval() -> None:
    cmp = compare_records([_rec(0, 1.0)], [_rec(1, 0.0)], candidate_name="a", baseline_name="b")
    assert cmp.rows == 0 and cmp.diff is None and cmp.verdict == "not enough paired rows"


def test_pass_measure_pairs_each_rows_pass_rate_with_failures_as_not_passed() -> None:
    def rec(row: int, run: int, reward: float | None, status: str = "success") -> EvalRecord:
        r = _rec(row, reward, run=run, status=status)
        r.passed = reward is not None and reward >= 1.0
        return r

    cand = [rec(0, 0, 1.0), rec(0, 1, 1.0), rec(1, 0, 1.0), rec(1, 1, 0.5)]
    base = [rec(0, 0, 0.5), rec(0, 1, None, "failed"), rec(1, 0, 1.0), rec(1, 1, 0.0)]
    by_pass = compare_records(cand, base, candidate_name="c", baseline_name="b", measure="pass")
    assert by_pass.measure == "pass" and by_pass.rows == 2
    assert by_pass.candidate_mean == pytest.approx(0.75)  # rows: 1.0 and 0.5
    assert by_pass.baseline_mean == pytest.approx(0.25)  # rows: 0.0 (a failure) and 0.5
    assert by_pass.diff == pytest.approx(0.5)
    by_reward = compare_records(cand, base, candidate_name="c", baseline_name="b")
    assert by_reward.measure == "reward" and by_reward.diff != by_pass.diff
