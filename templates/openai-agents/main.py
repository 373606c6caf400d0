"""The {{name}} rollout: an OpenAI Agents SDK calculator agent, trained through OsmosisAgent.

``osmosis eval run configs/eval/{{name}}.toml`` evaluates it; ``osmosis train submit
configs/training/{{name}}.toml`` trains on it. osmosis finds the one ``AgentWorkflow`` and the
one ``Grader`` defined in this file.

Coming from the plain Agents SDK? Two lines change: ``Agent`` becomes ``OsmosisAgent`` and the
model becomes ``OsmosisRolloutModel()`` (osmosis resolves it to the policy being evaluated or
trained; rollout code never names a model).
"""

from __future__ import annotations

from agents import MaxTurnsExceeded, Runner, function_tool

from osmosis_ai.grading import NumericAnswerGrader
from osmosis_ai.rollout import AgentWorkflow, AgentWorkflowContext
from osmosis_integrations import OsmosisAgent, OsmosisRolloutModel

SYSTEM_PROMPT = (
    "You are a calculator. Use the tools add, subtract, multiply and divide to compute the "
    "answer, then reply with only the final number, for example: 42"
)
MAX_TURNS = 6
"""A run that keeps calling tools is stopped after this many turns and graded as it stands."""


@function_tool
def add(a: float, b: float) -> float:
    """Add two numbers.

    Args:
        a: the first number.
        b: the second number.
    """
    return a + b


@function_tool
def subtract(a: float, b: float) -> float:
    """Subtract b from a.

    Args:
        a: the number to subtract from.
        b: the number to subtract.
    """
    return a - b


@function_tool
def multiply(a: float, b: float) -> float:
    """Multiply two numbers.

    Args:
        a: the first factor.
        b: the second factor.
    """
    return a * b


@function_tool
def divide(a: float, b: float) -> float:
    """Divide a by b.

    Args:
        a: the dividend.
        b: the divisor (not zero).
    """
    if b == 0:
        raise ValueError("cannot divide by zero")
    return a / b


class CalculatorWorkflow(AgentWorkflow):
    """One agent run per rollout; OsmosisAgent records the conversation as the sample."""

    async def run(self, ctx: AgentWorkflowContext) -> None:
        system = next((m["content"] for m in ctx.prompt if m.get("role") == "system"), None)
        question = next(m["content"] for m in reversed(ctx.prompt) if m.get("role") == "user")
        agent = OsmosisAgent(
            name="calculator",
            instructions=system or SYSTEM_PROMPT,
            tools=[add, subtract, multiply, divide],
            model=OsmosisRolloutModel(),
        )
        try:
            await Runner.run(agent, question, max_turns=MAX_TURNS)
        except MaxTurnsExceeded:
            # The agent kept calling tools. Its conversation so far is still the sample and is
            # graded as it stands (no final answer: no credit) rather than dropped as a failure.
            pass


class CalculatorGrader(NumericAnswerGrader):
    """Scores each sample's final number against the row's ``ground_truth``: 1.0 exact, 0.5
    right but wrapped in other text, 0.2 within 1%, else 0.0. The rule is
    ``osmosis_ai.grading.score_number``, shared by the calculator templates; override
    ``score(text, label)`` here to change it."""
