"""Whether bf16 base weights pay on this CPU: measured, not read from the CPU's flags.

oneDNN's bf16 kernels are not always the faster path. On a 2-vCPU AMD EPYC (Zen 4) a bf16
matmul at SmolLM2-135M's shapes ran 2.2x faster than fp32 (MKL's generic path there); on a
2-vCPU Intel Xeon (model 207, AVX-512 BF16 without AMX exposed) it ran 1.6x *slower* than MKL's
AVX-512 fp32 (``BENCHMARKS.md``, ``cpu``). Both report native bf16 kernels, so ``auto`` times
one matmul of each and keeps bf16 only where it is not clearly slower.

The matmuls run on one thread. On a machine whose cores are busy with other work, a
multi-threaded call mostly measures the scheduler (each call waits for its slowest thread): on
the Intel Xeon beside a training run, two-thread timings put bf16 at 0.75-1.29x fp32 and flipped
the choice between runs, while one-thread timings stayed at 1.71-1.81x, as on the quiet machine
(1.84x). The choice also decides the run's results, so it must not depend on the load.
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass

__all__ = ["DtypeProbe", "bf16_pays", "probe_cpu_matmul"]

PROBE_SHAPE = (512, 576, 1536)
"""Rows x inputs x outputs: a 512-token micro-batch through a SmolLM2-135M MLP projection,
the kind of product a CPU training step spends most of its time in."""
ROUNDS = 7
"""Interleaved timings per dtype; the minimum of each is kept (load only ever slows a call)."""
THREADS = 1
"""Threads the probe's matmuls run on (see the module's docstring)."""
BF16_MARGIN = 1.10
"""bf16 is kept while its matmul takes at most this many times fp32's: it halves the base
weights' memory, so a near tie goes to it. The measured CPUs sit far from the line (0.45x and
1.8x, on one thread, loaded or not)."""


@dataclass(frozen=True)
class DtypeProbe:
    """One probe's result: the fastest call of each dtype, in seconds."""

    fp32_s: float
    bf16_s: float

    @property
    def choice(self) -> str:
        return "bfloat16" if bf16_pays(self.fp32_s, self.bf16_s) else "float32"


def bf16_pays(fp32_s: float, bf16_s: float) -> bool:
    """Whether bf16 base weights are the better default, given one matmul's time in each."""
    return bf16_s <= fp32_s * BF16_MARGIN


@functools.cache
def probe_cpu_matmul() -> DtypeProbe:
    """Time :data:`PROBE_SHAPE` in fp32 and bf16 on :data:`THREADS` CPU thread(s) (~0.2 s, once
    per process)."""
    import torch

    rows, inputs, outputs = PROBE_SHAPE
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(rows, inputs, generator=gen)
    w = torch.randn(inputs, outputs, generator=gen)
    pairs = {torch.float32: (x, w), torch.bfloat16: (x.bfloat16(), w.bfloat16())}
    best = dict.fromkeys(pairs, float("inf"))
    threads = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    try:
        with torch.inference_mode():
            for a, b in pairs.values():  # the first call compiles oneDNN's kernel: not timed
                torch.matmul(a, b)
            for _ in range(ROUNDS):
                for dtype, (a, b) in pairs.items():
                    start = time.perf_counter()
                    torch.matmul(a, b)
                    best[dtype] = min(best[dtype], time.perf_counter() - start)
    finally:
        torch.set_num_threads(threads)
    result = DtypeProbe(fp32_s=best[torch.float32], bf16_s=best[torch.bfloat16])
    logging.getLogger("osmosis").info(
        'dtype "auto" on this CPU: a %dx%dx%d matmul on %d thread(s) takes %.2f ms in fp32 and '
        "%.2f ms in bf16: base weights in %s",
        rows,
        inputs,
        outputs,
        THREADS,
        result.fp32_s * 1e3,
        result.bf16_s * 1e3,
        result.choice,
    )
    return result
