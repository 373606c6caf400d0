"""The {{name}} rollout: arithmetic questions answered by one policy call, no agent framework.

The no-tools example: the model answers from its own head, and RL trains that one reply. For an
agent that calls tools over several turns, and a warm start that teaches it to, see the
``strands`` template (the README's quick start).

``osmosis eval run configs/eval/{{name}}.toml`` evaluates it; ``osmosis train submit
configs/training/{{name}}.toml`` trains on it. osmosis finds the one ``AgentWorkflow`` and the
one ``Grader`` defined in this file.
"""

from __future__ import annotations

from typing import Any

from osmosis_ai.grading import NumericAnswerGrader
from osmosis_ai.rollout import AgentWorkflow, AgentWorkflowContext

SYSTEM_PROMPT = (
    "You are a careful calculator. Work out the answer and reply with only the final number, "
    "for example: 42"
)


class CalculatorWorkflow(AgentWorkflow):
    """Ask the policy once and keep the conversation as the sample."""

    async def run(self, ctx: AgentWorkflowContext) -> list[dict[str, Any]]:
        messages = list(ctx.prompt)
        if not any(m.get("role") == "system" for m in messages):
            messages.insert(0, {"role": "system", "content": SYSTEM_PROMPT})
        reply = await ctx.chat(messages)
        return [*messages, reply.message]


class CalculatorGrader(NumericAnswerGrader):
    """Scores each sample's final number against the row's ``ground_truth``: 1.0 exact, 0.5
    right but wrapped in other text, 0.2 within 1%, else 0.0. The rule is
    ``osmosis_ai.grading.score_number``, shared by the calculator templates; override
    ``score(text, label)`` here to change it."""
