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
"""Model calls per question: a turn that keeps calling tools is stopped here, and the rollout
graded as it stands (a question needs two: the tool call and the answer)."""


@tool
def add(a: float, b: float) -> str:
    """Add two numbers.

    Args:
        a: the first number.
        b: the second number.
    """
    return _result(a + b)


@tool
def subtract(a: float, b: float) -> str:
    """Subtract b from a.

    Args:
        a: the number to subtract from.
        b: the number to subtract.
    """
    return _result(a - b)


@tool
def multiply(a: float, b: float) -> str:
    """Multiply two numbers.

    Args:
        a: the first factor.
        b: the second factor.
    """
    return _result(a * b)


@tool
def divide(a: float, b: float) -> str:
    """Divide a by b.

    Args:
        a: the dividend.
        b: the divisor (not zero).
    """
    if b == 0:
        raise ValueError("cannot divide by zero")
    return _result(a / b)


def _result(x: float) -> str:
    """What a tool answers: "The result is 5." (whole numbers without ".0").

    A sentence, not a bare number: follow-up questions say "the result", and a small model
    finds the number to carry into its next call by that phrase (a bare number in the tool
    message was never carried over: BENCHMARKS.md, "learning")."""
    n = int(x) if float(x).is_integer() else x
    return f"The result is {n}."


TOOLS = [add, subtract, multiply, divide]


class CalculatorWorkflow(AgentWorkflow):
    """One Strands agent per rollout; its conversation becomes the sample (returned as None).

    A row may go on over several turns: its ``follow_ups`` column lists the next questions
    ("What is the result - 1500?"), asked one after the other in the same conversation.
    """

    async def run(self, ctx: AgentWorkflowContext) -> None:
        system = next((m["content"] for m in ctx.prompt if m.get("role") == "system"), None)
        question = next(m["content"] for m in reversed(ctx.prompt) if m.get("role") == "user")
        agent = OsmosisStrandsAgent(
            model=OsmosisRolloutModel(),
            tools=TOOLS,
            system_prompt=system or SYSTEM_PROMPT,
            callback_handler=None,
        )
        limit = _ModelCallLimit(MAX_MODEL_CALLS)
        agent.add_hook(limit, BeforeModelCallEvent)
        for turn in [question, *_follow_ups(ctx.metadata)]:
            limit.calls = 0
            try:
                await agent.invoke_async(turn)
            except MaxTokensReachedException:
                # The reply hit max_tokens. Strands keeps the partial message, so the sample is
                # still graded (a cut-off ramble rarely holds a clean answer, so it scores low);
                # counting it as a failure would hide exactly the behaviour training should fix.
                return
            if limit.calls > MAX_MODEL_CALLS:
                return  # stopped by the limit: the conversation ends here


def _follow_ups(metadata: dict[str, Any]) -> list[str]:
    """The row's next questions (``follow_ups``: a list of strings, or absent)."""
    value = metadata.get("follow_ups") or []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError("the dataset's follow_ups column must be a list of strings")
    return list(value)


CALL_LIMIT_TEXT = "stopped: too many model calls"
"""The final answer Strands records when the call limit ends a rollout."""


class _ModelCallLimit:
    """A Strands hook that ends the agent's turn instead of making model call ``limit + 1``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.calls = 0
        """Model calls of the current turn (the workflow resets it for each question)."""

    def __call__(self, event: BeforeModelCallEvent) -> None:
        self.calls += 1
        if self.calls > self.limit:
            # Strands ends the turn with this text as the final answer (no digits: no credit).
            event.cancel = CALL_LIMIT_TEXT


STEP_CREDIT = 0.4
"""Most a wrong final answer can earn for the question's steps its tool calls computed."""

_QUESTION = re.compile(r"(-?\d+(?:\.\d+)?)((?:\s*[-+*/]\s*-?\d+(?:\.\d+)?)+)\s*\?")
_STEP = re.compile(r"([-+*/])\s*(-?\d+(?:\.\d+)?)")
_APPLY = {"+": float.__add__, "-": float.__sub__, "*": float.__mul__, "/": float.__truediv__}
_FOLLOW_UP = re.compile(r"\bthe result\s*([-+*/])\s*(-?\d+(?:\.\d+)?)\s*\?", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


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
        steps = _row_steps(ctx.metadata) or _question_steps(ctx.prompt, _follow_ups(ctx.metadata))
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
        numbers = _NUMBER.findall(str(m.get("content")))  # "The result is 5."
        if not numbers:
            continue
        value = float(numbers[-1])
        if math.isclose(value, steps[done], rel_tol=1e-9, abs_tol=1e-9):
            done += 1
    credit = STEP_CREDIT * done / len(steps)
    return credit if calls >= len(steps) else credit / 2


def _row_steps(metadata: dict[str, Any]) -> list[float]:
    """The row's ``steps`` column: the value after each operation, as ``make_data.py`` writes
    it (so a follow-up may be worded any way). Empty when the row has none."""
    value = metadata.get("steps") or []
    if not isinstance(value, list) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in value
    ):
        raise ValueError("the dataset's steps column must be a list of numbers")
    return [float(v) for v in value]


def _question_steps(prompt: list[dict[str, Any]], follow_ups: list[str]) -> list[float]:
    """For rows without a ``steps`` column (your own): the value after each operation, left to
    right, of "What is 347 * 29 - 1500?", then of each follow-up worded "What is the result -
    1500?". Empty when a question is not of these forms (the grader then scores the final
    answer alone)."""
    text = next((str(m.get("content")) for m in reversed(prompt) if m.get("role") == "user"), "")
    match = _QUESTION.search(text)
    if match is None:
        return []
    ops = _STEP.findall(match.group(2))
    for follow_up in follow_ups:
        found = _FOLLOW_UP.search(follow_up)
        if found is None:
            return []
        ops.append((found.group(1), found.group(2)))
    value, steps = float(match.group(1)), []
    for op, operand in ops:
        if op == "/" and float(operand) == 0:
            return []
        value = _APPLY[op](value, float(operand))
        steps.append(value)
    return steps
