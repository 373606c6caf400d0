"""An OpenAI Agents SDK calculator rollout, as a user would write it (entrypoint).

The agent is defined once at module level (the SDK's idiom) and run in every rollout. Row
metadata picks the variant: ``mode`` = ``run`` (Runner.run), ``streamed`` (Runner.run_streamed)
or ``sync`` (Runner.run_sync from a worker thread).
"""

from __future__ import annotations

import asyncio

from agents import Runner, function_tool

from osmosis_ai.rollout import AgentWorkflow, AgentWorkflowContext, Grader, GraderContext
from osmosis_integrations import OsmosisAgent, OsmosisRolloutModel


@function_tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@function_tool
def subtract(a: int, b: int) -> int:
    """Subtract b from a."""
    return a - b


@function_tool
def multiply(a: int, b: int) -> int:
    """Multiply two numbers."""
    return a * b


calculator = OsmosisAgent(
    name="calculator",
    instructions="You are a calculator. Use the tools, then answer with the number only.",
    tools=[add, subtract, multiply],
    model=OsmosisRolloutModel(temperature=0.7),
)


class CalcWorkflow(AgentWorkflow):
    async def run(self, ctx: AgentWorkflowContext) -> None:
        question = ctx.prompt[-1]["content"]
        mode = ctx.metadata.get("mode", "run")
        if mode == "streamed":
            result = Runner.run_streamed(calculator, question)
            async for _event in result.stream_events():
                pass
        elif mode == "sync":
            await asyncio.to_thread(Runner.run_sync, calculator, question)
        else:
            await Runner.run(calculator, question)


class CalcGrader(Grader):
    async def grade(self, ctx: GraderContext) -> None:
        for sample_id, sample in ctx.samples.items():
            answer = sample.extra_fields.get("final_answer", "")
            ctx.set_sample_reward(sample_id, 1.0 if answer == ctx.label else 0.0)
