"""The {{name}} rollout: short customer-support replies, scored by an LLM judge on a rubric.

``osmosis eval run configs/eval/{{name}}.toml`` evaluates it; ``osmosis train submit
configs/training/{{name}}.toml`` trains on it. The judge is its own model, never the policy:

- offline (the default), the embedded SmolLM2-135M-Instruct judges in "levels" mode: it writes
  a level from 1 to 5 and a reason, and the score averages ``n`` sampled levels (G-Eval);
- with ``OPENAI_API_KEY`` set, ``openai/gpt-4o-mini`` judges instead (its level probabilities
  come back as logprobs, so one call per reply is enough);
- ``OSMOSIS_JUDGE_MODEL`` overrides both (any LiteLLM id, an http(s) URL, a model folder).

A judge that cannot be read after retries fails the sample with its raw reply (a grader
failure in the results), never a silent 0.
"""

from __future__ import annotations

import os
from typing import Any

from osmosis_ai.grading import RubricGrader, Scale
from osmosis_ai.rollout import AgentWorkflow, AgentWorkflowContext

SYSTEM_PROMPT = (
    "You are a friendly support agent for the Acme Notes app. Answer the customer in at most "
    "three sentences: say exactly what to tap or click, and be polite."
)

RUBRIC = """\
A good support reply:
1. answers the customer's actual question with a concrete step (which menu, button or page);
2. is polite and calm, without blaming the customer;
3. is short: three sentences at most, no filler;
4. does not invent policies, prices or features the question does not need."""

HOSTED = bool(os.environ.get("OPENAI_API_KEY"))


class SupportWorkflow(AgentWorkflow):
    """Ask the policy once for a reply to the customer."""

    async def run(self, ctx: AgentWorkflowContext) -> list[dict[str, Any]]:
        messages = list(ctx.prompt)
        if not any(m.get("role") == "system" for m in messages):
            messages.insert(0, {"role": "system", "content": SYSTEM_PROMPT})
        reply = await ctx.chat(messages)
        return [*messages, reply.message]


class SupportGrader(RubricGrader):
    """Scores each reply against RUBRIC with an LLM judge (0 = fails it, 1 = fully meets it)."""

    rubric = RUBRIC
    judge_model = "openai/gpt-4o-mini" if HOSTED else "embedded"
    mode = "levels"
    scale = Scale(min=0.0, max=1.0, levels=5)
    n = 1 if HOSTED else 3
