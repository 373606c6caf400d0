"""The tiny training workspace the Ray tests share: one policy call per rollout, and a KILL file.

The first workflow that takes ``rollouts/even/KILL`` (an atomic rename, so exactly one does)
kills something: an empty file ends its own rollout worker process (``os._exit``), a file
holding an actor name kills that named Ray actor (an inference engine), from a workflow on
the engine's node, and waits for it to die before its own call.
Tests drop the file from a step report hook, so the kill happens exactly once, mid-step.
"""

from __future__ import annotations

import json
from pathlib import Path

from osmosis_trainer.models import load_model
from tests.e2e.toy_workspace import make_workspace, rollout_source

__all__ = ["ROLLOUTS", "STEPS", "assert_same_trajectories", "kill_file", "token_ids", "workspace"]

HEADER = '''
import os
from pathlib import Path

HERE = Path(os.environ.get("OSMOSIS_TEST_ROLLOUT_DIR", Path(__file__).parent))


async def take_kill():
    """What the KILL file asks of this workflow ("" = end your own process, a name = kill that
    engine), or None when it is not this workflow's to take. Only a workflow on the engine's
    own node takes an engine's name: its worker's calls go to that engine, so its own call
    meets the dead engine and the loss shows in this very step."""
    kill = HERE / "KILL"
    try:
        target = kill.read_text().strip()
    except FileNotFoundError:
        return None
    if target:
        import ray

        try:
            where = await ray.get_actor(target).where.remote()
        except Exception:  # read before another workflow took the file and killed the engine
            return None
        if where["node_id"] != ray.get_runtime_context().get_node_id():
            return None
    try:
        os.rename(kill, HERE / "KILL.taken")  # atomic: exactly one workflow takes it
    except FileNotFoundError:
        return None
    return target
'''

BEFORE_CHAT = '''
target = await take_kill()
if target == "":
    os._exit(1)  # this rollout worker's process dies mid-step
if target:
    import asyncio

    import ray

    engine = ray.get_actor(target)
    ray.kill(engine)  # an inference engine dies mid-step
    while True:  # until the kill has landed: this workflow's own call must find it dead
        try:
            await engine.where.remote()
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
            break
        await asyncio.sleep(0.05)
import ray

if ray.is_initialized():
    with open(HERE / "nodes.log", "a") as fh:
        fh.write(ray.get_runtime_context().get_node_id() + "\\n")
seed = 1000 * ctx.row_index + ctx.sample_index
'''

ROLLOUT = rollout_source(header=HEADER, before_chat=BEFORE_CHAT, chat_args="seed=seed")

STEPS = 3
ROLLOUTS = 16  # 4 rows x 4 samples per step


def workspace(root: Path, model_dir: Path, cluster: str, **training: object) -> Path:
    """A workspace training for ``STEPS`` steps; ``cluster`` is appended to its TOML.

    The rollout folder is shipped to the workers (``runtime_env``), so the workflow finds the
    driver's folder (KILL file, nodes.log) through ``OSMOSIS_TEST_ROLLOUT_DIR`` in ``[env]``.
    """
    eos = int(load_model(str(model_dir)).tokenizer.eos_token_id)
    rollout_dir = root / "rollouts" / "even"
    config = make_workspace(
        root, model_dir, eos_id=eos, rows=12, max_steps=STEPS, **training,
        extra_toml="\n[logging]\nreport_to = []\ntrace_samples_per_step = 16\n"
        f'\n[env]\nOSMOSIS_TEST_ROLLOUT_DIR = "{rollout_dir}"\n' + cluster,
    )
    (rollout_dir / "main.py").write_text(ROLLOUT)
    return config


def kill_file(config: Path) -> Path:
    """The KILL file of the workspace whose training config is ``config``."""
    return config.parents[2] / "rollouts" / "even" / "KILL"


def token_ids(run_path: Path, step: int) -> dict[str, list[list[int]]]:
    """(row, sample) -> the token ids of its sequences, from the step's trace file."""
    out: dict[str, list[list[int]]] = {}
    for line in (run_path / "traces" / f"step_{step:06d}.jsonl").read_text().splitlines():
        rec = json.loads(line)
        key = rec["rollout_id"].split("-")[0]  # r{row}s{sample}-{uuid}
        assert key not in out, f"{key} traced twice in step {step}"
        out[key] = [s["token_ids"] for s in rec["sequences"]]
    return out


def assert_same_trajectories(
    got: dict[str, list[list[int]]], want: dict[str, list[list[int]]]
) -> None:
    """The same (row, sample) keys, and the same token ids for all but at most one of them.

    Each sample draws from its own seeded generator, so its tokens do not depend on what else
    the engine decodes. Its logits do, in the last bits: another batch composition (the
    cluster's workers send requests at other moments) gives the matmuls other shapes. A draw
    that lands within that rounding of a cumulative-probability boundary picks the neighbour
    token, and the rest of that sequence differs. That is rare (one sample, once, in the
    project's CI runs) but not impossible; two in one run would take a second such draw. A
    broken seed or a lost request changes many samples, which this still catches.
    """
    assert got.keys() == want.keys()
    differ = sorted(k for k in want if got[k] != want[k])
    assert len(differ) <= 1, f"{len(differ)} of {len(want)} samples differ: {differ}"
    for k in differ:  # the same prompt: only the sampled continuation may differ
        assert got[k][0][:8] == want[k][0][:8], k
