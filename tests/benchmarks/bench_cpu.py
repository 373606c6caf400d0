"""CPU kernels at the embedded SmolLM2-135M's shapes: bf16 against fp32, 1 against 2 threads.

Run: ``python -m tests.benchmarks cpu`` (about a minute). It answers, on the machine at hand,
the questions behind ``[training] dtype = "auto"`` and behind a step time that differs
between two machines with the same CPU flags (BENCHMARKS.md, trainer_real, "Zen 4 gap"):

- which kernels torch picks: oneDNN's ISA for a bf16 matmul (``ONEDNN_VERBOSE``, in a child
  process), and the BLAS behind fp32 (MKL in the CPU wheels: it does not go through oneDNN);
- whether bf16 is native or emulated here: the bf16/fp32 time ratio of each matmul;
- how much compute a second thread adds (``speedup 2 / 1 threads``): about 2x on two real
  cores, about 1.0-1.3x where the two vCPUs are hyper-threads of one core (a guest's
  ``lscpu`` may not say so).

Rounds are interleaved (every shape and dtype once per round) and each figure is the median
over rounds, with the spread, so a slow minute on a shared machine spreads over all of them.
Each round's times go to ``docs/benchmarks/cpu.json`` as it ends, with the kernels oneDNN and
MKL named; the section is rendered from that file (``python -m tests.benchmarks.bench_cpu
render`` redoes it without measuring, marked **stale** when this file changed since).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from tests.benchmarks._report import spread, trainer_openmp
from tests.benchmarks._stored import Sitting

NAME = "cpu"
TITLE = "CPU kernels at SmolLM2-135M's shapes: bf16 vs fp32, 1 vs 2 threads"
COMMAND = "python -m tests.benchmarks cpu"
CODE = ("tests/benchmarks/bench_cpu.py",)
"""What the section measures (its fingerprint): torch's kernels, and this file's shapes."""
ROUNDS = int(os.environ.get("OSMOSIS_BENCH_RUNS", "5"))
BUDGET_S = 0.15
"""Seconds of calls each figure is the median of."""


@dataclass(frozen=True)
class Shape:
    label: str
    m: int
    k: int
    n: int
    batch: int = 0
    """Batched matmul (attention): ``batch`` products of [m, k] x [k, n]."""

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.k * self.n * max(self.batch, 1)


# SmolLM2-135M: hidden 576, MLP 1536, 9 query / 3 key-value heads of 64, vocabulary 49152.
SHAPES = (
    Shape("decode step, 32 rows: MLP up (32x576 @ 576x1536)", 32, 576, 1536),
    Shape("update micro-batch, 1024 tokens: MLP up (1024x576 @ 576x1536)", 1024, 576, 1536),
    Shape("update micro-batch, 1024 tokens: MLP down (1024x1536 @ 1536x576)", 1024, 1536, 576),
    Shape("logits, 256 tokens (256x576 @ 576x49152)", 256, 576, 49152),
    Shape("attention scores, 32 rows x 3 KV heads (96 x 276x64 @ 64x92)", 276, 64, 92, batch=96),
)


def _operands(shape: Shape, dtype: object) -> Callable[[], object]:
    import torch

    dt: torch.dtype = dtype  # type: ignore[assignment]
    if shape.batch:
        a = torch.randn(shape.batch, shape.m, shape.k).to(dt)
        b = torch.randn(shape.batch, shape.k, shape.n).to(dt)
        return lambda: torch.matmul(a, b)
    x = torch.randn(shape.m, shape.k).to(dt)
    w = torch.randn(shape.n, shape.k).to(dt)  # nn.Linear's layout
    return lambda: torch.nn.functional.linear(x, w)


def _seconds(fn: Callable[[], object], budget_s: float = BUDGET_S) -> float:
    """Median seconds per call over ~``budget_s`` of calls (after one warm-up call)."""
    fn()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < 3 or (time.perf_counter() - start < budget_s and len(times) < 200):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def onednn_isa() -> str:
    """The ISA oneDNN reports and the kernel it runs for a bf16 matmul (a child process, so
    ``ONEDNN_VERBOSE`` reaches oneDNN before it initialises)."""
    code = (
        "import torch; a=torch.randn(64,576).bfloat16(); w=torch.randn(1536,576).bfloat16(); "
        "torch.nn.functional.linear(a,w)"
    )
    env = {**os.environ, "ONEDNN_VERBOSE": "1"}
    try:
        out = subprocess.run(
            [sys.executable, "-c", code],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        ).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"
    isa = next((ln.split("isa:", 1)[1] for ln in out.splitlines() if "isa:" in ln), "?")
    kernel = next(
        (
            ln.split(",")[6]
            for ln in out.splitlines()
            if ",primitive,exec," in ln and "matmul" in ln
        ),
        "no oneDNN matmul (bf16 went elsewhere)",
    )
    return f"{isa.strip()}; bf16 matmul kernel `{kernel}`"


def mkl_path() -> str:
    """The code path MKL names for an fp32 matmul (``MKL_VERBOSE``, in a child process): on
    Intel CPUs an ISA ("AVX-512 ... enabled processors"), on others a generic path."""
    code = "import torch; torch.nn.functional.linear(torch.randn(64,576), torch.randn(1536,576))"
    env = {**os.environ, "MKL_VERBOSE": "1"}
    try:
        out = subprocess.run(
            [sys.executable, "-c", code],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        ).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"
    head = next(
        (ln for ln in out.splitlines() if ln.startswith("MKL_VERBOSE") and " for " in ln), ""
    )
    if not head:
        return "no MKL call seen (fp32 went elsewhere)"
    return head.split(" for ", 1)[1].split(",")[0].strip()


@dataclass
class Probe:
    """Per shape: seconds per call, one list per (dtype, threads) over the rounds."""

    times: dict[tuple[str, str, int], list[float]]

    def ratio(self, shape: Shape, num: tuple[str, int], den: tuple[str, int]) -> list[float]:
        a = self.times[(shape.label, *num)]
        b = self.times[(shape.label, *den)]
        return [x / y for x, y in zip(a, b, strict=True)]

    def gflops(self, shape: Shape, dtype: str, threads: int) -> list[float]:
        return [shape.flops / t / 1e9 for t in self.times[(shape.label, dtype, threads)]]


def probe(
    rounds: int = ROUNDS,
    shapes: tuple[Shape, ...] = SHAPES,
    on_round: Callable[[int, list[dict[str, Any]]], None] | None = None,
) -> Probe:
    """Time every shape in fp32 and bf16 at 2 threads, and at 1 thread, ``rounds`` times,
    interleaved; ``on_round(round, times)`` after each round (``times``: one
    ``{"shape", "dtype", "threads", "s"}`` per figure), so the figures are stored as they come."""
    import torch

    before = torch.get_num_threads()
    ops = {
        (s.label, name): _operands(s, dt)
        for s in shapes
        for name, dt in (("fp32", torch.float32), ("bf16", torch.bfloat16))
    }
    times: dict[tuple[str, str, int], list[float]] = {}
    try:
        for r in range(rounds):
            this_round: list[dict[str, Any]] = []
            for threads in (2, 1):
                torch.set_num_threads(threads)
                for s in shapes:
                    for name in ("fp32", "bf16"):
                        t = _seconds(ops[(s.label, name)])
                        times.setdefault((s.label, name, threads), []).append(t)
                        this_round.append({"shape": s.label, "dtype": name, "threads": threads,
                                           "s": t})
            if on_round is not None:
                on_round(r, this_round)
    finally:
        torch.set_num_threads(before)
    return Probe(times)


def summary(p: Probe, shapes: tuple[Shape, ...] = SHAPES) -> str:
    lines = [
        "| matmul | fp32 GFLOP/s (2 thr) | bf16 GFLOP/s (2 thr) | fp32 / bf16 time "
        "| speedup 2 / 1 threads, bf16 | speedup 2 / 1 threads, fp32 |",
        "|---|---|---|---|---|---|",
    ]
    for s in shapes:
        lines.append(
            f"| {s.label} | {spread(p.gflops(s, 'fp32', 2), '{:.0f}')} "
            f"| {spread(p.gflops(s, 'bf16', 2), '{:.0f}')} "
            f"| {spread(p.ratio(s, ('fp32', 2), ('bf16', 2)))}x "
            f"| {spread(p.ratio(s, ('bf16', 1), ('bf16', 2)))}x "
            f"| {spread(p.ratio(s, ('fp32', 1), ('fp32', 2)))}x |"
        )
    return "\n".join(lines)


def main() -> None:
    trainer_openmp()  # first (Sitting.start loads torch): the kernels wait as the worker's do
    sitting = Sitting.start(
        NAME, COMMAND, CODE, rounds=ROUNDS, budget_s=BUDGET_S, shapes=[asdict(s) for s in SHAPES]
    )
    # What this machine's kernels are is measured too: it is stored with the times.
    sitting.data["onednn"] = onednn_isa()
    sitting.data["mkl"] = mkl_path()

    def stored(r: int, times: list[dict[str, Any]]) -> None:
        sitting.record({"round": r, "times": times})
        print("round", r, "done", flush=True)

    probe(on_round=stored)
    render()


def stored_probe(runs: list[dict[str, Any]]) -> Probe:
    """The :class:`Probe` of stored rounds (in the order they ran)."""
    times: dict[tuple[str, str, int], list[float]] = {}
    for run in runs:
        for t in run["times"]:
            times.setdefault((t["shape"], t["dtype"], int(t["threads"])), []).append(t["s"])
    return Probe(times)


def render() -> None:
    """Rewrite the section from ``docs/benchmarks/cpu.json``."""
    sitting = Sitting.for_render(NAME, TITLE, COMMAND)
    if sitting is None:
        return
    data = sitting.data
    shapes = tuple(Shape(**s) for s in data["shapes"])
    done = len(sitting.runs)
    short = "" if done == data["rounds"] else f" (of {data['rounds']}: the sitting ended early)"
    body = "\n".join(
        [
            f"oneDNN: {data['onednn']}. fp32 matmuls run through the BLAS torch was built with "
            f"(MKL in the CPU wheels), not oneDNN; MKL's code path here: {data['mkl']}.",
            "",
            f"Median [min-max] over {done} interleaved rounds{short}; each figure is the "
            f"median of ~{data['budget_s']:g} s of calls. 'fp32 / bf16 time' above 1: bf16 is "
            "faster (native kernels); 'speedup 2 / 1 threads' near 2: two real cores, near 1: "
            "one core's hyper-threads (or a busy machine: see the load average).",
            "",
            summary(stored_probe(sitting.runs), shapes),
        ]
    )
    print(body, flush=True)
    sitting.write(TITLE, body)


if __name__ == "__main__":
    if sys.argv[1:] == ["render"]:
        render()
    else:
        main()
