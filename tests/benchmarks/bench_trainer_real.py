"""The trainer benchmark's real-model case (embedded SmolLM2-135M): its own BENCHMARKS.md section.

See :mod:`tests.benchmarks.bench_trainer`. Run: ``python -m tests.benchmarks trainer_real``
(``OSMOSIS_BENCH_RUNS`` rounds, default 3: every row, main and ablation, runs once per round,
interleaved, and the section is rewritten after each round; ``OSMOSIS_BENCH_ABLATIONS`` picks
ablation rows by key, comma-separated, empty for none, unset for
``bench_trainer.DEFAULT_ABLATIONS``; ``OSMOSIS_BENCH_QUICK=1`` is a smoke run that only prints).
TRL's process peaks near 13 GB: run it on a machine with that much free. On 2 idle cores a round
takes about 25-30 minutes (~1 min per run of ours, ~3 min per TRL run, ~3 min per long-prompt
ablation run): 3 rounds about 1.5 hours.
"""

from __future__ import annotations

from tests.benchmarks.bench_trainer import main_real

__all__ = ["main"]


def main() -> None:
    main_real()
