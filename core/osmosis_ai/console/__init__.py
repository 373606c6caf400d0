"""Console output shared by the CLI and the processes it starts (the training worker writes
its progress lines into ``<run>/train.log`` with the same view): rich for humans, JSON for
machines, and the progress views of a training run."""

from __future__ import annotations

from osmosis_ai.console._output import CliConsole, CliState, quiet_libraries, state
from osmosis_ai.console._progress import LineView, LiveView, ascii_chart, line_view, sparkline

__all__ = [
    "CliConsole",
    "CliState",
    "LineView",
    "LiveView",
    "ascii_chart",
    "line_view",
    "quiet_libraries",
    "sparkline",
    "state",
]
