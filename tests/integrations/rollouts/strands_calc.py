"""A Strands calculator rollout, as a user would write it (entrypoint for RolloutRunner).

Row metadata picks the variant: ``mode`` = ``async`` (invoke_async), ``sync`` (``agent(...)``
from a worker thread: Strands runs it on a fresh event loop) or ``stream`` (streaming policy
calls); ``agents`` = 2 runs a second, named agent on the same question.
"""

from __future__ import annotations

import asyncio
from typing import Any

from strands import tool
from strands.types.exceptions import MaxTokensReachedException

from osmosis_ai.rollout import (
    AgentWorkflow,
    AgentWorkflowConfig,
    AgentWorkflowContext,
    Grader,
    GraderContext,
)
from osmosis_integrations import OsmosisRolloutModel, OsmosisStrandsAgent


@tool
def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: the first number.
        b: the second number.
    """
    return a + b


@tool
def subtract(a: int, b: int) -> int:
    """Subtract b from a.

    Args:
        a: the number to subtract from.
        b: the number to subtract.
    """
    return a - b


@tool
def multiply(a: int, b: int) -> int:
    """Multiply two numbers.

    Args:
        a: the first factor.
        b: the second factor.
    """
    return a * b


workflow_config = AgentWorkflowConfig(name="calc", model=OsmosisRolloutModel(temperature=0.7))


class CalcWorkflow(AgentWorkflow[AgentWorkflowConfig]):
    async def run(self, ctx: AgentWorkflowContext[AgentWorkflowConfig]) -> None:
        assert ctx.config is not None
        model: OsmosisRolloutModel = ctx.config.model  # type: ignore[attr-defined]
        mode = ctx.metadata.get("mode", "async")
        if mode == "stream":
            model = OsmosisRolloutModel(stream=True, **model.params)
        system = ctx.prompt[0]["content"]
        question = ctx.prompt[-1]["content"]
        names: list[Any] = [None] if ctx.metadata.get("agents", 1) == 1 else [None, "checker"]
        for name in names:
            agent = OsmosisStrandsAgent(
                model=model,
                tools=[add, subtract, multiply],
                system_prompt=system,
                callback_handler=None,
                **({"name": name} if name else {}),
            )
            try:
                if mode == "sync":
                    await asyncio.to_thread(agent, question)
                else:
                    await agent.invoke_async(question)
            except MaxTokensReachedException:
                if not ctx.metadata.get("tolerant"):
                    raise


class CalcGrader(Grader):
    async def grade(self, ctx: GraderContext) -> None:
        for sample_id, sample in ctx.samples.items():
            answer = sample.extra_fields.get("final_answer", "")
            ctx.set_sample_reward(sample_id, 1.0 if answer == ctx.label else 0.0)
