"""A scripted judge: the real policy gateway in front of a scripted engine (ScriptedEngine)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from osmosis_ai.grading import JudgeModel
from osmosis_ai.rollout import GraderContext, RolloutSample
from osmosis_ai.serving import GenerationRequest
from osmosis_ai.serving.gateway import PolicyGateway
from osmosis_ai.testing import FakeRequest, ScriptedEngine

_RESPONSE = re.compile(r"<response-([0-9a-f]+)(?: id=\d+)?>\n(.*?)\n</response-\1>", re.DOTALL)


def shown_responses(req: GenerationRequest | FakeRequest) -> list[str]:
    """The responses a prompt shows (inside their nonce tags), in the order shown: from the last
    message that has any (worked examples come before it, a retry's request after it)."""
    for message in reversed(req.messages):
        shown = [m.group(2).strip() for m in _RESPONSE.finditer(str(message.get("content")))]
        if shown:
            return shown
    return []


def graded_response(req: GenerationRequest | FakeRequest) -> str:
    """The one response a rubric prompt asks about."""
    (response,) = shown_responses(req)
    return response


def prefer_shorter(req: GenerationRequest) -> str:
    """A group judge that gives shorter responses higher scores (1 / length rank)."""
    shown = shown_responses(req)
    ranked = sorted(range(len(shown)), key=lambda i: len(shown[i]))
    scores = {i: 1.0 - rank / max(1, len(shown) - 1) for rank, i in enumerate(ranked)}
    return json.dumps(
        {
            "scores": [
                {"id": i + 1, "score": round(scores[i], 4), "reasons": f"{len(shown[i])} chars"}
                for i in range(len(shown))
            ]
        }
    )


@dataclass
class ScriptedJudge:
    engine: ScriptedEngine
    model: JudgeModel

    @property
    def requests(self) -> list[GenerationRequest]:
        return [r.generation for r in self.engine.requests if r.generation is not None]


@asynccontextmanager
async def scripted_judge(
    script: list[str] | Callable[[GenerationRequest], str], **model_kwargs: Any
) -> AsyncIterator[ScriptedJudge]:
    """A JudgeModel whose calls go through the real gateway to a scripted engine."""
    engine = ScriptedEngine(per_sample=False, script=script)
    async with PolicyGateway(engine, sampling=None) as gw:
        yield ScriptedJudge(engine, JudgeModel(f"{gw.url}/v1", **model_kwargs))


def grader_ctx(
    answers: dict[str, str],
    *,
    question: str = "How do I reset my password?",
    label: str | None = None,
    row_index: int | None = None,
    n_samples: int = 1,
    sample_index: int = 0,
) -> GraderContext[Any]:
    prompt = [{"role": "user", "content": question}]
    samples = {
        sid: RolloutSample(id=sid, messages=[*prompt, {"role": "assistant", "content": text}])
        for sid, text in answers.items()
    }
    return GraderContext(
        samples=samples,
        label=label,
        prompt=prompt,
        row_index=row_index,
        n_samples=n_samples,
        sample_index=sample_index,
    )
