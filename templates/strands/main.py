"""The {{name}} rollout: a Strands calculator agent with tools, trained through OsmosisStrandsAgent.

``osmosis eval run configs/eval/{{name}}.toml`` evaluates it; ``osmosis train submit
configs/training/{{name}}.toml`` trains on it. osmosis finds the one ``AgentWorkflow`` and the
one ``Grader`` defined in this file.

Coming from plain Strands? Two lines change: ``Agent`` becomes ``OsmosisStrandsAgent`` and the
model becomes ``OsmosisRolloutModel()`` (osmosis resolves it to the policy being evaluated or
trained; rollout code never names a model).
"""

from __future__ import annotations

import math
import re
from typing import Any

from strands import tool
from strands.hooks import BeforeModelCallEvent
from strands.types.exceptions import MaxTokensReachedException

from osmosis_ai.grading import NumericAnswerGrader, final_text
from osmosis_ai.rollout import AgentWorkflow, AgentWorkflowContext, GraderContext
from osmosis_integrations import OsmosisRolloutModel, OsmosisStrandsAgent

SYSTEM_PROMPT = (
    "You are a calculator. Compute the answer with the tools add, subtract, multiply and "
    "divide, one operation per call, feeding each result into the next call. Then reply with "
    "only the final number, for example: 42"
)
MAX_MODEL_CALLS = 4
"""A rollout that keeps calling tools is stopped here and graded as it stands (three
operations need four model calls: three tool calls and the answer)."""


@tool
def add(a: float, b: float) -> float:
    """Add two numbers.

    Args:
        a: the first number.
        b: the second number.
    """
    return _whole(a + b)


@tool
def subtract(a: float, b: float) -> float:
    """Subtract b from a.

    Args:
        a: the number to subtract from.
        b: the number to subtract.
    """
    return _whole(a - b)


@tool
def multiply(a: float, b: float) -> float:
    """Multiply two numbers.

    Args:
        a: the first factor.
        b: the second factor.
    """
    return _whole(a * b)


@tool
def divide(a: float, b: float) -> float:
    """Divide a by b.

    Args:
        a: the dividend.
        b: the divisor (not zero).
    """
    if b == 0:
        raise ValueError("cannot divide by zero")
    return _whole(a / b)


def _whole(x: float) -> float:
    """A whole result as an int (``5``, not ``5.0``): the model copies it into its next call."""
    return int(x) if float(x).is_integer() else x


TOOLS = [add, subtract, multiply, divide]


class CalculatorWorkflow(AgentWorkflow):
    """One Strands agent per rollout; its conversation becomes the sample (returned as None)."""

    async def run(self, ctx: AgentWorkflowContext) -> None:
        system = next((m["content"] for m in ctx.prompt if m.get("role") == "system"), None)
        question = next(m["content"] for m in reversed(ctx.prompt) if m.get("role") == "user")
        agent = OsmosisStrandsAgent(
            model=OsmosisRolloutModel(),
            tools=TOOLS,
            system_prompt=system or SYSTEM_PROMPT,
            callback_handler=None,
        )
        agent.add_hook(_model_call_limit(MAX_MODEL_CALLS), BeforeModelCallEvent)
        try:
            await agent.invoke_async(question)
        except MaxTokensReachedException:
            # The reply hit max_tokens. Strands keeps the partial message, so the sample is
            # still graded (a cut-off ramble rarely holds a clean answer, so it scores low);
            # counting it as a failure would hide exactly the behaviour training should fix.
            pass


CALL_LIMIT_TEXT = "stopped: too many model calls"
"""The final answer Strands records when the call limit ends a rollout."""


def _model_call_limit(limit: int) -> Any:
    """A Strands hook that ends the agent's turn instead of making model call ``limit + 1``."""
    calls = 0

    def before_model_call(event: BeforeModelCallEvent) -> None:
        nonlocal calls
        calls += 1
        if calls > limit:
            # Strands ends the turn with this text as the final answer (no digits: no credit).
            event.cancel = CALL_LIMIT_TEXT

    return before_model_call


STEP_CREDIT = 0.4
"""Most a wrong final answer can earn for the question's steps its tool calls computed."""

_QUESTION = re.compile(r"(-?\d+(?:\.\d+)?)((?:\s*[-+*/]\s*-?\d+(?:\.\d+)?)+)\s*\?")
_STEP = re.compile(r"([-+*/])\s*(-?\d+(?:\.\d+)?)")
_APPLY = {"+": float.__add__, "-": float.__sub__, "*": float.__mul__, "/": float.__truediv__}


class CalculatorGrader(NumericAnswerGrader):
    """Scores each sample's final number against the row's ``ground_truth``: 1.0 exact, 0.5
    right but wrapped in other text (the rule is ``osmosis_ai.grading.score_number``, shared by
    the calculator templates; its 0.2 for "within 1%" is not used here, see below).

    A wrong answer still earns credit for the steps of a multi-step question (``chain_credit``):
    without it, nearly every early rollout scores 0 and RL has no gradient to follow.
    """

    async def grade(self, ctx: GraderContext[Any]) -> None:
        if ctx.label is None:
            raise ValueError("this grader needs a ground_truth column in the dataset")
        steps = _question_steps(ctx.prompt)
        for sample_id, sample in ctx.samples.items():
            reward = self.score(final_text(sample.messages), ctx.label)
            if reward < 0.5 and steps:
                reward = chain_credit(steps, sample.messages)
                if final_text(sample.messages) == CALL_LIMIT_TEXT:
                    reward /= 2  # calling tools until stopped is no better than stopping early
            elif reward < 0.5:
                reward = 0.0
            ctx.set_sample_reward(sample_id, reward)


def chain_credit(steps: list[float], messages: list[dict[str, Any]]) -> float:
    """Credit for a wrong final answer to a question whose operations give ``steps``.

    ``STEP_CREDIT`` times the share of steps its tool results computed in order, halved when
    the agent answered before making one call per operation. Stopping after one right call
    must never be the safe choice: a first version paid the same for "right first call, then
    answer" as for "right first call, then a wrong second one", and RL learned to stop
    (BENCHMARKS.md, "learning"). Ranking, for two operations: wrong first call 0, right first
    call then answer 0.1, right first call then any second call 0.2, both right 0.4, exact 1.0.
    An answer within 1% of the right one earns nothing: the intermediate value of
    ``9000 + 4000 - 50`` is within 1% of the answer, which would pay for stopping early.
    """
    done, calls = 0, 0
    for m in messages:
        if m.get("role") != "tool":
            continue
        calls += 1
        if done == len(steps):
            continue
        try:
            value = float(str(m.get("content")).strip())
        except ValueError:
            continue
        if math.isclose(value, steps[done], rel_tol=1e-9, abs_tol=1e-9):
            done += 1
    credit = STEP_CREDIT * done / len(steps)
    return credit if calls >= len(steps) else credit / 2


def _question_steps(prompt: list[dict[str, Any]]) -> list[float]:
    """The value after each operation of "What is 347 * 29 - 1500?", left to right."""
    text = next((str(m.get("content")) for m in reversed(prompt) if m.get("role") == "user"), "")
    match = _QUESTION.search(text)
    if match is None:
        return []
    value, steps = float(match.group(1)), []
    for op, operand in _STEP.findall(match.group(2)):
        if op == "/" and float(operand) == 0:
            return []
        value = _APPLY[op](value, float(operand))
        steps.append(value)
    return steps
