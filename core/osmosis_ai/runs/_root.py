"""Where a workspace keeps its runs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = ["runs_root_for", "workspace_root_here", "workspace_runs_root"]


def runs_root_for(config: Any) -> Path:
    """``[checkpoints].output_dir`` when set, else ``<workspace>/runs``."""
    out = config.output_dir() if hasattr(config, "output_dir") else None
    return Path(out) if out is not None else Path(config.workspace_root) / "runs"


def workspace_runs_root(start: Path | None = None) -> Path:
    """The runs folder for commands given no config: ``$OSMOSIS_RUNS_DIR``, else ``runs/`` in
    the nearest folder (from ``start``, default the current one, upwards) that has ``runs/``
    or ``configs/``, else ``./runs``."""
    env = os.environ.get("OSMOSIS_RUNS_DIR")
    if env:
        return Path(env).expanduser()
    return workspace_root_here(start) / "runs"


def workspace_root_here(start: Path | None = None) -> Path:
    """The workspace a command runs in: the nearest folder (from ``start``, default the current
    one, upwards) that has ``runs/`` or ``configs/``, else the start folder itself."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "runs").is_dir() or (folder / "configs").is_dir():
            return folder
    return here
