"""An OpenAI Agents SDK calculator rollout: the README migration example (two lines differ)."""

# ruff: noqa: F401, I001  (a migration example: the diff to its _after twin stays minimal)

from __future__ import annotations

from agents import Agent, Runner, function_tool

from osmosis_ai.rollout import AgentWorkflow, AgentWorkflowContext, Grader, GraderContext
from osmosis_integrations import OsmosisAgent, OsmosisRolloutModel

SYSTEM = "You are a calculator. Use the tools, then answer with the number only."


@function_tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


calculator = OsmosisAgent(name="calculator", instructions=SYSTEM, tools=[add], model=OsmosisRolloutModel())


class CalculatorWorkflow(AgentWorkflow):
    async def run(self, ctx: AgentWorkflowContext) -> None:
        await Runner.run(calculator, ctx.prompt[-1]["content"])


class CalculatorGrader(Grader):
    async def grade(self, ctx: GraderContext) -> None:
        for sample_id, sample in ctx.samples.items():
            answer = sample.messages[-1].get("content")
            ctx.set_sample_reward(sample_id, float(answer == ctx.label))
