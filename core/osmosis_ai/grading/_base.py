"""What both judges share: the model call with bounded retries, concurrency, cache, usage."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypedDict, TypeVar

from osmosis_ai.errors import UnreadableFileError
from osmosis_ai.grading._cache import JudgeCache
from osmosis_ai.grading._model import JudgeModel, JudgeModelError, JudgeReply
from osmosis_ai.grading._parse import MalformedAnswer
from osmosis_ai.grading._prompts import retry_messages
from osmosis_ai.grading._types import JudgeUsage, JudgeVerdict, Scale
from osmosis_ai.rollout import Message, RolloutSample

__all__ = ["Attempt", "JudgeBase", "JudgeOptions", "Mode", "read_rubric"]

T = TypeVar("T")
Mode = Literal["json", "levels"]


def read_rubric(rubric: str | Path) -> str:
    """The rubric text: a :class:`~pathlib.Path` is read; a string is the rubric itself."""
    if isinstance(rubric, Path):
        from osmosis_ai.safe_io import read_text

        try:
            text = read_text(rubric, follow=True)
        except UnreadableFileError as exc:
            raise ValueError(f"cannot read the rubric file: {exc}") from None
    else:
        text = rubric
    if not text.strip():
        raise ValueError("the rubric is empty: describe what a good response does")
    return text


class Attempt:
    """The outcome of one judged call, retries included: a parsed value or a failure."""

    def __init__(self) -> None:
        self.value: Any = None
        self.reply: JudgeReply | None = None
        self.error: str | None = None
        self.raw: list[str] = []
        self.usage = JudgeUsage()

    @property
    def ok(self) -> bool:
        return self.error is None


def _as_scale(scale: Scale | tuple[float, float]) -> Scale:
    return scale if isinstance(scale, Scale) else Scale(min=scale[0], max=scale[1])


class JudgeOptions(TypedDict, total=False):
    """The settings every judge takes (see :class:`JudgeBase`); subclasses accept them as
    ``**options`` so each default is written once, in :class:`JudgeBase`."""

    scale: Scale | tuple[float, float]
    n: int
    temperature: float | None
    max_tokens: int | None
    max_retries: int
    max_concurrent: int
    cache: JudgeCache | bool
    few_shot: bool | None


class JudgeBase:
    """Settings and machinery shared by :class:`RubricJudge` and :class:`GroupJudge`.

    Args:
        rubric: the rubric text, or a :class:`~pathlib.Path` to read it from.
        model: a :class:`JudgeModel` or a model spec (``"embedded"``, a URL, a LiteLLM id).
        scale: the score range (a :class:`Scale` or ``(min, max)``); also the reward range.
        n: judge calls per judgement, averaged (group judge: each call sees another order).
        temperature: sampling temperature of the judge (default 0 for one call, 1 for more).
        max_tokens: the longest judge reply (default: the judge kind's
            ``default_max_tokens``).
        max_retries: extra calls after an unreadable answer before it is a failure.
        max_concurrent: judge calls in flight at once (per event loop).
        cache: a :class:`JudgeCache`, ``True`` for a fresh in-memory one, ``False`` for none.
        few_shot: put worked examples in the prompt (default: only for local judges, which
            need them).
    """

    kind = "judge"
    default_max_tokens = 256

    def __init__(
        self,
        rubric: str | Path,
        *,
        model: JudgeModel | str,
        scale: Scale | tuple[float, float] = (0.0, 1.0),
        n: int = 1,
        temperature: float | None = None,
        max_tokens: int | None = None,
        max_retries: int = 2,
        max_concurrent: int = 8,
        cache: JudgeCache | bool = True,
        few_shot: bool | None = None,
    ) -> None:
        if n < 1 or max_retries < 0 or max_concurrent < 1:
            raise ValueError("need n >= 1, max_retries >= 0 and max_concurrent >= 1")
        self.rubric = read_rubric(rubric)
        self.model = model if isinstance(model, JudgeModel) else JudgeModel(model)
        self.scale = _as_scale(scale)
        self.n = n
        self.temperature = temperature if temperature is not None else (0.0 if n == 1 else 1.0)
        self.max_tokens = max_tokens if max_tokens is not None else self.default_max_tokens
        self.max_retries = max_retries
        self.max_concurrent = max_concurrent
        self.cache: JudgeCache | None = (
            cache if isinstance(cache, JudgeCache) else (JudgeCache() if cache else None)
        )
        # Worked examples in the prompt: on by default for local (small) judges only.
        self.few_shot = few_shot if few_shot is not None else self.model.kind == "engine"
        self.usage = JudgeUsage()
        """Running totals over every judgement this judge made."""
        self._limits: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore]
        self._limits = weakref.WeakKeyDictionary()

    def _limit(self) -> asyncio.Semaphore:
        # One semaphore per event loop: a judge built at import time may serve several loops.
        loop = asyncio.get_running_loop()
        sem = self._limits.get(loop)
        if sem is None:
            sem = self._limits[loop] = asyncio.Semaphore(self.max_concurrent)
        return sem

    def _key_parts(self) -> list[Any]:
        return [
            self.kind,
            self.model.model,
            self.rubric,
            self.scale.model_dump(),
            self.n,
            self.temperature,
        ]

    async def _ask(
        self,
        messages: list[Message],
        parse: Callable[[str], T],
        *,
        seed: int,
        top_logprobs: int | None = None,
    ) -> Attempt:
        """One judged call: ask, parse, and on an unreadable answer ask again (bounded)."""
        attempt = Attempt()
        convo = messages
        for retry in range(self.max_retries + 1):
            try:
                async with self._limit():
                    reply = await self.model.chat(
                        convo,
                        temperature=self.temperature,
                        max_tokens=self.max_tokens,
                        top_logprobs=top_logprobs,
                        seed=seed + 1000 * retry,
                    )
            except JudgeModelError as exc:
                attempt.error = str(exc)
                return attempt
            attempt.usage.calls += 1
            attempt.usage.retries += int(retry > 0)
            attempt.usage.prompt_tokens += reply.prompt_tokens
            attempt.usage.completion_tokens += reply.completion_tokens
            if reply.cost_usd is None:
                attempt.usage.unpriced_calls += 1
            else:
                attempt.usage.cost_usd += reply.cost_usd
            attempt.raw.append(reply.text)
            try:
                attempt.value = parse(reply.text)
            except MalformedAnswer as exc:
                attempt.error = f"malformed judge answer after {retry + 1} call(s): {exc}"
                convo = retry_messages(messages, reply.text, str(exc))
                continue
            attempt.reply = reply
            attempt.error = None
            return attempt
        return attempt

    def _finish(self, verdict: JudgeVerdict) -> JudgeVerdict:
        if not verdict.ok:
            verdict.usage.failures += 1
        self.usage.add(verdict.usage)
        return verdict

    def _cached(self, key: str) -> JudgeVerdict | None:
        if self.cache is None:
            return None
        payload = self.cache.get(key)
        if payload is None:
            return None
        verdict = JudgeVerdict.model_validate({**payload, "cached": True})
        verdict.usage.cache_hits = 1
        self.usage.cache_hits += 1
        return verdict

    async def aclose(self) -> None:
        """Release the judge model (a local engine); the judge stays usable (it reloads)."""
        await self.model.aclose()


def record_on_sample(sample: RolloutSample, verdict: JudgeVerdict) -> None:
    """Put a verdict's score, reasons and cost where eval traces and training metrics see them."""
    for name, value in verdict.usage.as_metrics().items():
        sample.metrics[name] = sample.metrics.get(name, 0.0) + value
    sample.extra_fields["judge"] = {
        "score": verdict.score,
        "reasons": verdict.reasons,
        "probabilities": verdict.probabilities,
        "positions": verdict.positions,
        "cached": verdict.cached,
    }
