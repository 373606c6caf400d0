"""Eval metrics: unbiased pass@k, reward statistics, pass rate, failures by reason."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from osmosis_ai.eval import EvalRecord, pass_at_k, pass_at_k_values, summarize


def _combinatorial(n: int, c: int, k: int) -> float:
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (4, 1, 1, 0.25),  # pass@1 is the plain success rate
        (4, 1, 2, 0.5),  # 1 - C(3,2)/C(4,2) = 1 - 3/6
        (4, 2, 2, 5 / 6),  # 1 - C(2,2)/C(4,2) = 1 - 1/6
        (4, 0, 4, 0.0),
        (4, 4, 1, 1.0),
        (8, 3, 8, 1.0),  # every draw of 8 contains a pass
        (10, 1, 4, 0.4),  # 1 - C(9,4)/C(10,4) = 1 - 126/210
    ],
)
def test_pass_at_k_hand_computed(n: int, c: int, k: int, expected: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


@given(
    st.integers(1, 60).flatmap(
        lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))
    )
)
def test_pass_at_k_matches_the_combinatorial_formula(args: tuple[int, int, int]) -> None:
    n, c, k = args
    assert pass_at_k(n, c, k) == pytest.approx(_combinatorial(n, c, k), abs=1e-9)


def test_pass_at_k_large_n_stays_finite() -> None:
    value = pass_at_k(5000, 3, 1024)
    assert 0.0 < value < 1.0


@pytest.mark.parametrize(("n", "c", "k"), [(4, 5, 1), (4, -1, 1), (4, 1, 0), (4, 1, 5)])
def test_pass_at_k_rejects_impossible_arguments(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError, match="pass_at_k needs"):
        pass_at_k(n, c, k)


@pytest.mark.parametrize(
    ("n", "ks"), [(1, []), (2, [1, 2]), (3, [1, 2]), (4, [1, 2, 4]), (12, [1, 2, 4, 8])]
)
def test_pass_at_k_values_are_powers_of_two(n: int, ks: list[int]) -> None:
    assert pass_at_k_values(n) == ks


def _rec(row: int, run: int, status: str, reward: float | None = None, **kw: object) -> EvalRecord:
    return EvalRecord(
        row_index=row,
        run_index=run,
        rollout_id=f"r{row}-{run}",
        sample_id="main",
        status=status,  # type: ignore[arg-type]
        reward=reward,
        **kw,  # type: ignore[arg-type]
    )


def test_summarize_counts_failures_as_not_passed_and_leaves_out_skipped() -> None:
    records = [
        _rec(0, 0, "success", 1.0, prompt_tokens=10, completion_tokens=5, duration_ms=100),
        _rec(0, 1, "success", 0.5, prompt_tokens=10, completion_tokens=5, duration_ms=300),
        _rec(1, 0, "failed", error_type="timeout", error="took too long", duration_ms=1000),
        _rec(1, 1, "skipped", duration_ms=200),
        _rec(2, 0, "failed", error_type="timeout", error="again"),
        _rec(2, 1, "failed", error_type="agent_error", error="boom"),
    ]
    s = summarize(records, pass_threshold=1.0, n=2, wall_time_s=3.0)
    assert (s.samples, s.success, s.failed, s.skipped) == (6, 2, 3, 1)
    assert s.passed == 1
    assert s.pass_rate == pytest.approx(1 / 5)  # skipped left out; failures count
    assert s.reward.mean == pytest.approx(0.75)
    assert s.reward.median == pytest.approx(0.75)
    assert s.reward.std == pytest.approx(0.25)
    assert (s.reward.min, s.reward.max) == (0.5, 1.0)
    assert s.failures_by_reason == {"timeout": 2, "agent_error": 1}
    assert s.failure_examples == {"timeout": "took too long", "agent_error": "boom"}
    # groups: row 0 -> 2 runs, 1 pass; row 1 -> 1 run (skipped one left out); row 2 -> 2 fails
    assert s.pass_at_k["pass@1"] == pytest.approx((0.5 + 0.0 + 0.0) / 3)
    assert s.pass_at_k["pass@2"] == pytest.approx((1.0 + 0.0) / 2)  # row 1 has < 2 runs
    assert s.prompt_tokens == 20 and s.completion_tokens == 10
    assert s.tokens_per_sample == pytest.approx(30 / 6)
    assert s.latency_ms["max"] == 1000
    assert s.wall_time_s == 3.0


def test_summarize_threshold_and_no_pass_at_k_for_single_runs() -> None:
    records = [_rec(i, 0, "success", r) for i, r in enumerate([0.2, 0.5, 0.7, 1.0])]
    s = summarize(records, pass_threshold=0.5, n=1)
    assert s.passed == 3
    assert s.pass_rate == pytest.approx(0.75)
    assert s.pass_at_k == {}


def test_summarize_empty() -> None:
    s = summarize([], pass_threshold=1.0, n=4)
    assert s.samples == 0 and s.pass_rate is None and s.reward.mean is None
    assert s.pass_at_k == {} and s.latency_ms == {}


def test_summarize_reports_tool_use_on_the_pass_rate_samples() -> None:
    records = [
        _rec(0, 0, "success", 1.0, num_calls=3, tool_calls=2),
        _rec(0, 1, "success", 0.0, num_calls=1, tool_calls=0),
        _rec(1, 0, "failed", error_type="timeout", num_calls=2, tool_calls=1),
        _rec(1, 1, "skipped", num_calls=5, tool_calls=4),  # left out, as from the pass rate
    ]
    s = summarize(records, pass_threshold=1.0, n=2)
    assert s.tool_call_rate == pytest.approx(2 / 3)
    assert s.tool_calls_per_rollout == pytest.approx(1.0)
    assert s.turns_per_rollout == pytest.approx(2.0)
    empty = summarize([], pass_threshold=1.0, n=1)
    assert empty.tool_call_rate is None and empty.turns_per_rollout is None
