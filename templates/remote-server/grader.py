"""The reward computed by the trainer instead of the server: ``[remote] reward = "grader"``.

With that setting (and ``[experiment] entrypoint = "grader.py"``) the trainer imports only this
file's Grader and scores the final messages the server sends back, with the same rule as
rewards.py; the server's own reward is then not used.
"""

from __future__ import annotations

from rewards import compute_reward, final_text

from osmosis_ai.rollout import Grader, GraderContext


class CalculatorGrader(Grader):
    """1.0 when the last number of the final answer equals the row's ground truth."""

    async def grade(self, ctx: GraderContext) -> None:
        for sample_id, sample in ctx.samples.items():
            reward = compute_reward(final_text(sample.messages), str(ctx.label))
            ctx.set_sample_reward(sample_id, reward)
