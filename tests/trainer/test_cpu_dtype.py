"""``dtype = "auto"`` on a CPU: the bf16-or-fp32 rule and the real timed probe."""

from __future__ import annotations

import logging
import math

import pytest

from osmosis_trainer._cpu_dtype import BF16_MARGIN, DtypeProbe, bf16_pays, probe_cpu_matmul


def test_bf16_is_kept_up_to_the_margin_and_dropped_past_it() -> None:
    assert bf16_pays(fp32_s=1.0, bf16_s=0.45)  # AMD EPYC, Zen 4
    assert bf16_pays(fp32_s=1.0, bf16_s=BF16_MARGIN)  # a near tie: bf16 halves the memory
    assert not bf16_pays(fp32_s=1.0, bf16_s=BF16_MARGIN + 0.01)
    assert not bf16_pays(fp32_s=1.0, bf16_s=1.6)  # Intel Xeon without AMX
    assert DtypeProbe(fp32_s=1.0, bf16_s=1.6).choice == "float32"
    assert DtypeProbe(fp32_s=1.0, bf16_s=0.45).choice == "bfloat16"


def test_the_probe_times_both_dtypes_once_per_process(caplog: pytest.LogCaptureFixture) -> None:
    probe_cpu_matmul.cache_clear()
    with caplog.at_level(logging.INFO, logger="osmosis"):
        first = probe_cpu_matmul()
        again = probe_cpu_matmul()
    assert again is first
    for seconds in (first.fp32_s, first.bf16_s):
        assert 0 < seconds < math.inf
    assert first.choice in ("bfloat16", "float32")
    said = [r.getMessage() for r in caplog.records if "dtype" in r.getMessage()]
    assert len(said) == 1 and said[0].endswith(first.choice)


def test_the_probe_times_on_one_thread_and_gives_the_threads_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Multi-threaded timings on a busy machine measure the scheduler and flipped the choice
    # between runs; one thread's do not. The caller's thread count is restored.
    import torch

    seen: list[int] = []
    matmul = torch.matmul

    def counting(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        seen.append(torch.get_num_threads())
        return matmul(a, b)

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    monkeypatch.setattr(torch, "matmul", counting)
    probe_cpu_matmul.cache_clear()
    try:
        probe_cpu_matmul()
        assert seen and set(seen) == {1}
        assert torch.get_num_threads() == 2
    finally:
        probe_cpu_matmul.cache_clear()
        torch.set_num_threads(before)
