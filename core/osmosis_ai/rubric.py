"""osmosis-ai's one-call rubric API: :func:`evaluate_rubric` and its errors.

``await evaluate_rubric(solution_str=..., rubric=..., model="openai/gpt-4o-mini")`` scores one
answer with an LLM judge and returns a :class:`RubricResult` (score and explanation). It is
:class:`osmosis_ai.grading.RubricJudge` with 0.3's signature: the judge model may be a LiteLLM
id (a hosted API, which needs its key), ``"embedded"`` or an ``http(s)://`` server.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from osmosis_ai.errors import OsmosisError

__all__ = [
    "MissingAPIKeyError",
    "ModelNotFoundError",
    "ProviderRequestError",
    "RubricResult",
    "evaluate_rubric",
]


@dataclass
class RubricResult:
    """One rubric judgement: the score (within the scale asked for) and the judge's reasons."""

    score: float
    explanation: str


class MissingAPIKeyError(OsmosisError, RuntimeError):
    """A hosted judge model needs an API key that was neither passed nor set in the environment."""


class ProviderRequestError(OsmosisError, RuntimeError):
    """The judge's provider refused or failed the request, or its answer could not be read."""

    def __init__(self, provider: str, model: str, detail: str) -> None:
        self.provider = provider
        self.model = model
        self.detail = detail.strip() or "the request failed with no detail"
        super().__init__(f"provider {provider!r} request for model {model!r} failed: {self.detail}")


class ModelNotFoundError(ProviderRequestError):
    """The provider does not know the judge model."""


_LOCAL_PREFIXES = ("http://", "https://", "/", "./", "../", "~")


def _provider(model: str) -> str:
    return model.split("/", 1)[0] if "/" in model else "openai"


def _key_variable(model: str) -> str | None:
    """The environment variable a hosted model's key comes from (``None``: no key needed)."""
    if model == "embedded" or model.startswith(_LOCAL_PREFIXES):
        return None
    provider = _provider(model)
    if provider in {"ollama", "ollama_chat", "hosted_vllm", "lm_studio", "llamafile"}:
        return None
    return f"{provider.upper().replace('-', '_')}_API_KEY"


async def evaluate_rubric(
    *,
    solution_str: str,
    rubric: str,
    model: str,
    ground_truth: str | None = None,
    original_input: str | None = None,
    metadata: dict[str, Any] | None = None,
    score_min: float = 0.0,
    score_max: float = 1.0,
    api_key: str | None = None,
    timeout: float | None = None,  # noqa: ASYNC109 - 0.3's keyword, a per-call limit
    system_prompt: str | None = None,
) -> RubricResult:
    """Score ``solution_str`` against ``rubric`` with the judge ``model``.

    Args:
        solution_str: the answer to score (non-empty).
        rubric: the criteria, in plain language (non-empty).
        model: the judge: a LiteLLM id (``"openai/gpt-4o-mini"``), ``"embedded"`` or a URL.
        ground_truth: a reference answer shown to the judge.
        original_input: the question the answer replies to.
        metadata: more context, shown to the judge as JSON.
        score_min, score_max: the score range.
        api_key: the provider key (default: ``<PROVIDER>_API_KEY`` from the environment).
        timeout: seconds per judge call.
        system_prompt: instructions put before the rubric.

    Raises:
        TypeError: an empty ``solution_str`` or ``rubric``.
        ValueError: ``score_max`` not above ``score_min``.
        MissingAPIKeyError: a hosted model without a key.
        ModelNotFoundError: the provider does not know the model.
        ProviderRequestError: the call failed, or the judge's answer could not be read.
    """
    from osmosis_ai.grading import JudgeModel, JudgeModelError, RubricJudge

    if not isinstance(solution_str, str) or not solution_str.strip():
        raise TypeError("evaluate_rubric: 'solution_str' must be a non-empty string")
    if not isinstance(rubric, str) or not rubric.strip():
        raise TypeError("evaluate_rubric: 'rubric' must be a non-empty string")
    if score_max <= score_min:
        raise ValueError(
            f"evaluate_rubric: score_max ({score_max}) must be greater than score_min ({score_min})"
        )
    variable = _key_variable(model)
    if variable is not None and not api_key and not os.environ.get(variable):
        raise MissingAPIKeyError(
            f"evaluate_rubric: the judge model {model!r} needs an API key: pass api_key=... or "
            f"set {variable}. To judge without a hosted API use model='embedded'"
        )
    text = rubric.strip()
    if system_prompt:
        text = f"{system_prompt.strip()}\n\n{text}"
    if metadata:
        text += "\n\nContext (JSON):\n" + json.dumps(metadata, ensure_ascii=False, default=str)
    judge = RubricJudge(
        text,
        model=JudgeModel(model, api_key=api_key, timeout_s=timeout or 120.0),
        scale=(score_min, score_max),
        cache=False,
    )
    try:
        verdict = await judge.score(solution_str, question=original_input, reference=ground_truth)
    except JudgeModelError as exc:
        detail = str(exc)
        lowered = detail.lower()
        if "notfound" in lowered.replace(" ", "") or "does not exist" in lowered:
            raise ModelNotFoundError(_provider(model), model, detail) from exc
        raise ProviderRequestError(_provider(model), model, detail) from exc
    finally:
        await judge.aclose()
    if not verdict.ok or verdict.score is None:
        raise ProviderRequestError(
            _provider(model), model, f"the judge's answer could not be read: {verdict.error}"
        )
    return RubricResult(score=float(verdict.score), explanation=verdict.reasons)
