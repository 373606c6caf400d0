"""Run traces: the one schema and the one path helper for ``<run>/traces/step_NNNNNN.jsonl``.

The trainer writes them (``osmosis_trainer.loop._traces``, a bounded sample of each step's
trajectories); the dashboard's trace view and ``osmosis dataset from-run`` read them. All three
use the names here, so they agree on the file names, the record shape and on links: a linked
``traces/`` folder or step file is never followed, and every file goes through
:mod:`osmosis_ai.safe_io`.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from osmosis_ai.runs._schema import run_file_root
from osmosis_ai.safe_io import JsonLines, read_jsonl

__all__ = [
    "TRACES_DIR",
    "TraceRecord",
    "TraceSequence",
    "read_trace_step",
    "trace_file",
    "trace_files",
]

TRACES_DIR = "traces"
"""The folder of a run that holds its traces."""
_STEP_FILE = re.compile(r"step_(\d{6,})\.jsonl")


class TraceSequence(TypedDict):
    """One training sequence of a traced sample (a JSON object in the trace file)."""

    token_ids: list[int]
    mask: list[int]
    sampler_logprobs: list[float | None]
    trainer_logprobs: list[float | None] | None
    """The policy's logprobs as the step's update computed them before changing the weights;
    ``None`` for a sequence that did not train."""
    cut: bool
    """The sequence was longer than ``[logging] trace_max_tokens`` and is cut there."""
    tokens: NotRequired[list[str]]
    """Each id's own text, when the sampler has a ``decode``."""


class TraceRecord(TypedDict):
    """One traced sample: a line of ``traces/step_NNNNNN.jsonl``."""

    step: int
    group_id: int
    rollout_id: str
    sample_id: str
    reward: float
    advantage: float | None
    """``None``: not trained (a zero-variance group skipped, or a masked truncation)."""
    truncated: bool
    messages: list[dict[str, Any]] | None
    """The last policy call's request messages and its reply, as OpenAI chat JSON objects."""
    tools: list[dict[str, Any]] | None
    """The tools specs the agent sent (absent in traces of older runs)."""
    sequences: list[TraceSequence]


def trace_file(run_path: Path, step: int) -> Path:
    """Where the trainer writes step ``step``'s traces (``<run>/traces/step_NNNNNN.jsonl``)."""
    return Path(run_path) / TRACES_DIR / f"step_{step:06d}.jsonl"


def trace_files(run_path: Path) -> dict[int, Path]:
    """``{step: file}`` of every step with traces. A linked ``traces/`` folder is not read
    (nothing listed); a step file that is a link or no regular file is listed, so that
    :func:`read_trace_step` names it as unreadable (it never follows it)."""
    folder = Path(run_path) / TRACES_DIR
    try:
        if not stat.S_ISDIR(folder.lstat().st_mode):
            return {}
        entries = list(os.scandir(folder))
    except OSError:
        return {}
    out: dict[int, Path] = {}
    for entry in entries:
        found = _STEP_FILE.fullmatch(entry.name)
        step = int(found.group(1)) if found else -1
        # Only the name the writer gives that step (step_0000001.jsonl is no step 1).
        if found and entry.name == trace_file(folder, step).name:
            if not entry.is_dir(follow_symlinks=False):
                out[step] = Path(entry.path)
    return dict(sorted(out.items()))


def read_trace_step(run_path: Path, step: int) -> JsonLines:
    """One step's trace records (each line a :class:`TraceRecord` as JSON) and its bad lines.

    Raises:
        UnreadableFileError: the file is missing, a link, not a regular file, too big or not
            UTF-8 (see :mod:`osmosis_ai.safe_io`).
    """
    return read_jsonl(trace_file(run_path, step), under=run_file_root(run_path))
