"""The run folder moved to :mod:`osmosis_ai.runs` (torch-free, read by the CLI and dashboard);
re-exported here for the loop's imports."""

from __future__ import annotations

from osmosis_ai.runs import RunDir, RunStatus, create_run_dir, read_status

__all__ = ["RunDir", "RunStatus", "create_run_dir", "read_status"]
