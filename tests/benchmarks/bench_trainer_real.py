"""The trainer benchmark's real-model case (embedded SmolLM2-135M): its own BENCHMARKS.md section.

See :mod:`tests.benchmarks.bench_trainer`. Run: ``python -m tests.benchmarks trainer_real``
(``OSMOSIS_BENCH_RUNS`` runs of each main row, default 3; ``OSMOSIS_BENCH_ABLATION_RUNS`` runs
of each ablation row, default the same; ``OSMOSIS_BENCH_ABLATIONS`` picks ablation rows by key,
empty for none). TRL's process peaks near 13 GB: run it on a machine with that much free. With
2 runs and 1 ablation run it takes about 30 minutes on 2 idle cores (~1 min per run of ours,
~3 min per TRL run, ~3 min per long-prompt ablation run).
"""

from __future__ import annotations

from tests.benchmarks.bench_trainer import main_real

__all__ = ["main"]


def main() -> None:
    main_real()
