"""A Strands calculator rollout: the README migration example (before and after differ in two lines)."""

# ruff: noqa: F401, I001  (a migration example: the diff to its _after twin stays minimal)

from __future__ import annotations

from strands import Agent, tool
from osmosis_integrations import OsmosisRolloutModel, OsmosisStrandsAgent

from osmosis_ai.rollout import AgentWorkflow, AgentWorkflowContext, Grader, GraderContext

SYSTEM = "You are a calculator. Use the tools, then answer with the number only."


@tool
def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: the first number.
        b: the second number.
    """
    return a + b


class CalculatorWorkflow(AgentWorkflow):
    async def run(self, ctx: AgentWorkflowContext) -> None:
        agent = OsmosisStrandsAgent(model=OsmosisRolloutModel(), tools=[add], system_prompt=SYSTEM)
        await agent.invoke_async(ctx.prompt[-1]["content"])


class CalculatorGrader(Grader):
    async def grade(self, ctx: GraderContext) -> None:
        for sample_id, sample in ctx.samples.items():
            answer = sample.messages[-1].get("content")
            ctx.set_sample_reward(sample_id, float(answer == ctx.label))
