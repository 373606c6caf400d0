"""A throwaway workspace whose rollout makes one ``ctx.chat`` call per rollout.

The grader rewards the fraction of even token ids in the sampled completion (read from the
recorded call), excluding EOS and requiring a minimum length, so the policy cannot win by
stopping at once. A tiny random model can learn it in a few dozen steps.
"""

from __future__ import annotations

import json
from pathlib import Path

ROLLOUT = '''
from osmosis_ai.rollout import AgentWorkflow, Grader


class EvenWorkflow(AgentWorkflow):
    async def run(self, ctx):
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


def make_workspace(
    root: Path, model_dir: Path, *, eos_id: int, rows: int = 8, extra_toml: str = "", **training: object
) -> Path:
    """Write rollouts/even/main.py, data/even.jsonl and configs/training/even.toml."""
    (root / "rollouts" / "even").mkdir(parents=True)
    (root / "rollouts" / "even" / "main.py").write_text(ROLLOUT)
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
    body = "\n".join(f"{k} = {json.dumps(v)}" for k, v in settings.items())
    (root / "configs" / "training").mkdir(parents=True)
    config = root / "configs" / "training" / "even.toml"
    config.write_text(
        f'[experiment]\nrollout = "even"\nentrypoint = "main.py"\nmodel_path = "{model_dir}"\n'
        f'dataset = "data/even.jsonl"\n\n[training]\n{body}\n\n[lora]\nr = 8\nalpha = 16\n'
        f"{extra_toml}"
    )
    return config
