"""A workspace whose rollout can be held at a gate, for run-lifecycle tests.

The rollout is :mod:`tests.e2e.toy_workspace`'s (one ``ctx.chat`` call, even token ids
rewarded) with a gate before the call. With ``GATE_FILE`` set in ``[env]``, every rollout after the
first ``GATE_AFTER`` waits until that file exists, after creating ``<GATE_FILE>.waiting``: a
test can hold a worker inside step 2 (past step 1's checkpoint and its stop check) for as long
as it needs, then stop it, kill it or let it go.
Each rollout writes ``marker.txt`` into ``ctx.artifacts_dir`` with ``MARKER``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.e2e import toy_workspace

HEADER = '''
import asyncio
import os
from pathlib import Path

MARKER = "{marker}"
_CALLS = [0]
'''

BEFORE_CHAT = '''
{body}
_CALLS[0] += 1
gate = os.environ.get("GATE_FILE")
if gate and _CALLS[0] > int(os.environ.get("GATE_AFTER", "16")):
    Path(gate + ".waiting").touch()
    while not Path(gate).exists():
        await asyncio.sleep(0.05)
(ctx.artifacts_dir / "marker.txt").write_text(MARKER)
'''


def rollout_source(marker: str = "working-tree", *, broken: bool = False) -> str:
    body = "raise RuntimeError('tool server down')" if broken else "pass"
    return toy_workspace.rollout_source(
        header=HEADER.replace("{marker}", marker), before_chat=BEFORE_CHAT.replace("{body}", body)
    )


def make_workspace(
    root: Path,
    model_path: str,
    *,
    eos_id: int,
    rows: int = 12,
    gate: Path | None = None,
    experiment_extra: str = "",
) -> Path:
    """rollouts/even/main.py, data/even.jsonl (``rows`` rows: 3 steps of 4) and
    configs/training/even.toml (checkpoint every step); returns the config path."""
    env = f'\n[env]\nGATE_FILE = "{gate}"\nGATE_AFTER = "16"\n' if gate is not None else ""
    return toy_workspace.make_workspace(
        root, model_path, eos_id=eos_id, rows=rows, rollout=rollout_source(),
        experiment_extra=experiment_extra, max_steps=None,
        extra_toml=f"\n[checkpoints]\ncheckpoint_save_freq = 1\n{env}",
    )


def hub_cache(cache: Path, model_id: str, model_dir: Path) -> Path:
    """Put ``model_dir`` into a Hugging Face cache layout as ``model_id``; returns the snapshot."""
    repo = cache / f"models--{model_id.replace('/', '--')}"
    commit = "0123456789abcdef0123456789abcdef01234567"
    snapshot = repo / "snapshots" / commit
    shutil.copytree(model_dir, snapshot)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    return snapshot
