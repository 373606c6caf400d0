"""A throwaway workspace whose rollout makes one ``ctx.chat`` call per rollout.

The grader rewards the fraction of even token ids in the sampled completion (read from the
recorded call), excluding EOS and requiring a minimum length, so the policy cannot win by
stopping at once. A tiny random model can learn it in a few dozen steps.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

GRADER = '''

class EvenGrader(Grader):
    async def grade(self, ctx):
        for sample_id, sample in ctx.samples.items():
            ids = list(sample.calls[-1].completion_token_ids or [])
            eos = int(ctx.metadata["eos_id"])
            body = [t for t in ids if t != eos]
            reward = 0.0 if len(body) < 4 else sum(t % 2 == 0 for t in body) / len(body)
            ctx.set_sample_reward(sample_id, reward)
'''


def rollout_source(*, header: str = "", before_chat: str = "", chat_args: str = "") -> str:
    """The rollout's ``main.py``: ``EvenWorkflow`` makes one ``ctx.chat(ctx.prompt{chat_args})``
    call and ``EvenGrader`` rewards even token ids. ``header`` (imports, module state) goes
    before the classes, ``before_chat`` (code of ``run``, unindented) before the call; tests
    that hold, kill or mark a rollout add theirs there, the rest stays this one definition."""
    run = textwrap.indent(textwrap.dedent(before_chat).strip("\n"), " " * 8)
    return (
        "from osmosis_ai.rollout import AgentWorkflow, Grader\n"
        + (textwrap.dedent(header).strip("\n") + "\n" if header else "")
        + "\n\nclass EvenWorkflow(AgentWorkflow):\n    async def run(self, ctx):\n"
        + (run + "\n" if run.strip() else "")
        + f"        reply = await ctx.chat(ctx.prompt{', ' + chat_args if chat_args else ''})\n"
        + "        return [*ctx.prompt, reply.message]\n"
        + GRADER
    )


ROLLOUT = rollout_source()


def make_workspace(
    root: Path,
    model_dir: Path | str,
    *,
    eos_id: int,
    rows: int = 8,
    rollout: str = ROLLOUT,
    experiment_extra: str = "",
    extra_toml: str = "",
    **training: object,
) -> Path:
    """Write rollouts/even/main.py (``rollout``), data/even.jsonl and
    configs/training/even.toml; ``training`` overrides ``[training]`` keys (``None`` drops
    one, e.g. ``max_steps=None`` trains every row once)."""
    (root / "rollouts" / "even").mkdir(parents=True)
    (root / "rollouts" / "even" / "main.py").write_text(rollout)
    (root / "data").mkdir()
    with open(root / "data" / "even.jsonl", "w") as fh:
        for i in range(rows):
            row = {"user_prompt": f"What is {i} + {i + 1}?", "ground_truth": str(2 * i + 1),
                   "eos_id": eos_id}
            fh.write(json.dumps(row) + "\n")
    settings = {
        "lr": 3e-2, "max_steps": 2, "rollout_batch_size": 4, "n_samples_per_prompt": 4,
        "max_prompt_length": 256, "max_response_length": 8, "device": "cpu",
        **training,
    }
    body = "\n".join(f"{k} = {json.dumps(v)}" for k, v in settings.items() if v is not None)
    (root / "configs" / "training").mkdir(parents=True)
    config = root / "configs" / "training" / "even.toml"
    config.write_text(
        f'[experiment]\nrollout = "even"\nentrypoint = "main.py"\nmodel_path = "{model_dir}"\n'
        f'dataset = "data/even.jsonl"\n{experiment_extra}\n[training]\n{body}\n\n[lora]\nr = 8\n'
        "alpha = 16\n"
        f"{extra_toml}"
    )
    return config
