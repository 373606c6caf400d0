"""The {{name}} remote rollout server: a calculator agent that answers with tools.

    osmosis validate -m server:agent_loop                        # check name and tool schemas
    osmosis test -m server:agent_loop -d test_data.jsonl         # run rows against a model
    osmosis serve -m server:agent_loop                           # serve it to a training cluster

The training cluster posts /v1/rollout/init; ``run`` then calls the cluster's LLM with
``ctx.chat`` (every call is recorded token by token for training), runs the tools, and returns
the conversation. When the row has a ground truth, the reward is computed here (rewards.py).
"""

from __future__ import annotations

import time

from rewards import compute_reward, final_text
from tools import CALCULATOR_TOOLS, execute_tool

from osmosis_ai.remote import (
    RolloutAgentLoop,
    RolloutContext,
    RolloutLimitExceeded,
    RolloutRequest,
    RolloutResult,
    create_app,
)

SYSTEM_PROMPT = (
    "You are a calculator. Use the tools add, subtract, multiply and divide for every step, "
    "then reply with only the final number."
)


class CalculatorAgent(RolloutAgentLoop):
    """Alternates LLM calls and tool calls until the model answers without a tool call."""

    name = "calculator"

    def get_tools(self, request: RolloutRequest) -> list[dict]:
        return CALCULATOR_TOOLS

    async def run(self, ctx: RolloutContext) -> RolloutResult:
        messages = list(ctx.request.messages)
        if not any(m.get("role") == "system" for m in messages):
            messages.insert(0, {"role": "system", "content": SYSTEM_PROMPT})
        finish_reason = "stop"
        try:
            for _ in range(ctx.request.max_turns):
                result = await ctx.chat(messages)
                messages.append(result.message)  # only ever append: the trainer relies on it
                if not result.has_tool_calls:
                    break
                for call in result.tool_calls:
                    started = time.perf_counter()
                    function = call.get("function", {})
                    output = execute_tool(function.get("name", ""), function.get("arguments", "{}"))
                    messages.append({"role": "tool", "tool_call_id": call.get("id"), "content": output})
                    ctx.record_tool_call(latency_ms=(time.perf_counter() - started) * 1000)
            else:
                finish_reason = "max_turns"
        except RolloutLimitExceeded as exc:
            # ctx.chat refused a call: the rollout used its max_turns or max_tokens_total.
            finish_reason = exc.reason
        # A truncated rollout still gets its reward (usually 0.0: no final answer yet).
        return ctx.complete(messages, finish_reason=finish_reason, reward=self.reward(ctx, messages))

    def reward(self, ctx: RolloutContext, messages: list[dict]) -> float | None:
        """The reward, when the row carries a ground truth (``None`` leaves it to the trainer)."""
        ground_truth = ctx.request.metadata.get("ground_truth")
        if ground_truth is None:
            return None
        return compute_reward(final_text(messages), str(ground_truth))


agent_loop = CalculatorAgent()

# `uvicorn server:app` works too; `osmosis serve` builds its own app from agent_loop.
app = create_app(agent_loop)
