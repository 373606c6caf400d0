"""A workspace whose rollout can be held at a gate, for run-lifecycle tests.

The rollout makes one ``ctx.chat`` call and the grader rewards even token ids (as in
:mod:`tests.e2e.toy_workspace`). With ``GATE_FILE`` set in ``[env]``, every rollout after the
first ``GATE_AFTER`` waits until that file exists: a test can hold a worker inside step 2
(after step 1's checkpoint) for as long as it needs, then stop it, kill it or let it go.
Each rollout writes ``marker.txt`` into ``ctx.artifacts_dir`` with ``MARKER``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

ROLLOUT = '''
import asyncio
import os
from pathlib import Path

from osmosis_ai.rollout import AgentWorkflow, Grader

MARKER = "{marker}"
_CALLS = [0]


class EvenWorkflow(AgentWorkflow):
    async def run(self, ctx):
        {body}
        _CALLS[0] += 1
        gate = os.environ.get("GATE_FILE")
        if gate and _CALLS[0] > int(os.environ.get("GATE_AFTER", "16")):
            while not Path(gate).exists():
                await asyncio.sleep(0.05)
        (ctx.artifacts_dir / "marker.txt").write_text(MARKER)
        reply = await ctx.chat(ctx.prompt)
        return [*ctx.prompt, reply.message]


class EvenGrader(Grader):
    async def grade(self, ctx):
        for sample_id, sample in ctx.samples.items():
            ids = list(sample.calls[-1].completion_token_ids or [])
            eos = int(ctx.metadata["eos_id"])
            body = [t for t in ids if t != eos]
            reward = 0.0 if len(body) < 4 else sum(t % 2 == 0 for t in body) / len(body)
            ctx.set_sample_reward(sample_id, reward)
'''


def rollout_source(marker: str = "working-tree", *, broken: bool = False) -> str:
    body = "raise RuntimeError('tool server down')" if broken else "pass"
    return ROLLOUT.replace("{marker}", marker).replace("{body}", body)


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
    (root / "rollouts" / "even").mkdir(parents=True)
    (root / "rollouts" / "even" / "main.py").write_text(rollout_source())
    (root / "data").mkdir()
    with open(root / "data" / "even.jsonl", "w") as fh:
        for i in range(rows):
            fh.write(json.dumps({"user_prompt": f"What is {i} + 1?", "ground_truth": str(i + 1),
                                 "eos_id": eos_id}) + "\n")
    (root / "configs" / "training").mkdir(parents=True)
    config = root / "configs" / "training" / "even.toml"
    env = f'\n[env]\nGATE_FILE = "{gate}"\nGATE_AFTER = "16"\n' if gate is not None else ""
    config.write_text(
        f'[experiment]\nrollout = "even"\nentrypoint = "main.py"\nmodel_path = "{model_path}"\n'
        f'dataset = "data/even.jsonl"\n{experiment_extra}\n[training]\nlr = 3e-2\n'
        "rollout_batch_size = 4\nn_samples_per_prompt = 4\nmax_prompt_length = 256\n"
        'max_response_length = 8\ndevice = "cpu"\n\n[lora]\nr = 8\nalpha = 16\n\n'
        f"[checkpoints]\ncheckpoint_save_freq = 1\n{env}"
    )
    return config


def hub_cache(cache: Path, model_id: str, model_dir: Path) -> Path:
    """Put ``model_dir`` into a Hugging Face cache layout as ``model_id``; returns the snapshot."""
    repo = cache / f"models--{model_id.replace('/', '--')}"
    commit = "0123456789abcdef0123456789abcdef01234567"
    snapshot = repo / "snapshots" / commit
    shutil.copytree(model_dir, snapshot)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    return snapshot
