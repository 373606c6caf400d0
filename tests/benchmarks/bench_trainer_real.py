"""The trainer benchmark's real-model case (embedded SmolLM2-135M): its own BENCHMARKS.md section.

See :mod:`tests.benchmarks.bench_trainer`. Run: ``python -m tests.benchmarks trainer_real``
(``OSMOSIS_BENCH_RUNS`` runs per setup, default 3).
"""

from __future__ import annotations

from tests.benchmarks.bench_trainer import main_real

__all__ = ["main"]


def main() -> None:
    main_real()
