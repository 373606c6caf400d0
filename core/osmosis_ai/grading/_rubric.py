"""RubricJudge: one response against a rubric, on a declared scale, with the judge's reasons."""

from __future__ import annotations

import asyncio
import math
from functools import partial
from pathlib import Path
from typing import Any, Unpack

from osmosis_ai.grading._base import Attempt, JudgeBase, JudgeOptions, Mode, record_on_sample
from osmosis_ai.grading._cache import cache_key
from osmosis_ai.grading._model import JudgeModel
from osmosis_ai.grading._parse import (
    first_token_level,
    level_distribution,
    parse_level,
    parse_rubric_json,
)
from osmosis_ai.grading._prompts import PROMPT_VERSION, final_text, question_text, rubric_messages
from osmosis_ai.grading._types import JudgeError, JudgeVerdict
from osmosis_ai.rollout import GraderContext

__all__ = ["RubricJudge"]

_TOP_LOGPROBS = 20


class RubricJudge(JudgeBase):
    """Score one response at a time against a rubric.

    Two ways to read the judge's answer (``mode``):

    - ``"json"``: the judge writes ``{"score": x, "reasons": "..."}``, validated (pydantic) and
      checked against the scale; an unreadable answer is retried, then recorded as a failure.
    - ``"levels"`` (G-Eval style): the judge writes a level digit ``1..scale.levels`` and a
      reason. Where the model returns top logprobs (OpenAI, vLLM, LiteLLM providers) the score
      is the expected level under the probabilities of the level tokens. Otherwise (osmosis's
      own gateway and engines, the embedded model included) ``n`` answers are sampled at
      temperature 1: each that begins with its level carries the judge's exact probability of
      that level (its first token's logprob), and the levels seen are weighted by them; answers
      without logprobs are simply averaged. Small models answer in this form far more reliably
      than in JSON.

    Use it in a grader in two lines::

        judge = RubricJudge("Reward replies that are polite and solve the problem.",
                            model="openai/gpt-4o-mini")

        class Support(Grader):
            async def grade(self, ctx):
                await judge.grade(ctx)

    Other arguments: see :class:`~osmosis_ai.grading.JudgeBase` (``scale``, ``n``, ``cache``,
    ``max_concurrent``, ``max_retries``, ``temperature``, ``max_tokens``, ``few_shot``).
    """

    kind = "rubric"

    def __init__(
        self,
        rubric: str | Path,
        *,
        model: JudgeModel | str,
        mode: Mode = "json",
        **options: Unpack[JudgeOptions],
    ) -> None:
        if mode not in ("json", "levels"):
            raise ValueError(f"mode must be 'json' or 'levels', got {mode!r}")
        super().__init__(rubric, model=model, **options)
        self.mode: Mode = mode

    async def score(
        self,
        response: str,
        *,
        question: str | None = None,
        reference: str | None = None,
        run: int = 0,
    ) -> JudgeVerdict:
        """Judge ``response`` (to ``question``, against an optional ``reference`` answer).

        Never raises for a bad judge answer: a failure comes back as a verdict with ``ok``
        False, the reason in ``error`` and the judge's replies in ``raw``. ``run`` numbers
        independent judgements of the same content (each its own cache entry and seeds), as
        when testing how stable a rubric's scores are.
        """
        key = cache_key(
            PROMPT_VERSION,
            *self._key_parts(),
            self.mode,
            self.few_shot,
            question,
            reference,
            response,
            run,
        )
        hit = self._cached(key)
        if hit is not None:
            return hit
        messages = rubric_messages(
            self.rubric,
            response,
            self.scale,
            mode=self.mode,
            question=question,
            reference=reference,
            few_shot=self.few_shot,
        )
        if self.mode == "json":
            parse: Any = partial(parse_rubric_json, scale=self.scale)
            top = None
        else:
            parse = partial(parse_level, scale=self.scale)
            top = _TOP_LOGPROBS if self.model.supports_top_logprobs else None
        attempts = await asyncio.gather(
            *(
                self._ask(messages, parse, seed=run * 7919 + i, top_logprobs=top)
                for i in range(self.n)
            )
        )
        verdict = self._combine(list(attempts))
        if verdict.ok and self.cache is not None:
            self.cache.put(key, verdict.cache_payload())
        return self._finish(verdict)

    def _combine(self, attempts: list[Attempt]) -> JudgeVerdict:
        good = [a for a in attempts if a.ok]
        raw = [text for a in attempts for text in a.raw]
        usage = attempts[0].usage
        for a in attempts[1:]:
            usage.add(a.usage)
        if not good:
            return JudgeVerdict(ok=False, error=attempts[0].error, raw=raw, usage=usage)
        if self.mode == "json":
            scores = [float(a.value.score) for a in good]
            return JudgeVerdict(
                ok=True,
                score=sum(scores) / len(scores),
                reasons=good[0].value.reasons,
                raw=raw,
                usage=usage,
            )
        return self._levels_verdict(good, raw, usage)

    def _levels_verdict(self, good: list[Attempt], raw: list[str], usage: Any) -> JudgeVerdict:
        totals = self._known_level_probabilities(good)
        if totals is None:
            # Each call gives a distribution over levels: the judge's own token probabilities
            # when it returned them, else the one level it wrote; averaging n calls estimates it.
            totals = {}
            for a in good:
                reply = a.reply
                dist = None
                if reply is not None and reply.top_logprobs:
                    dist = level_distribution(reply.top_logprobs, reply.sampled_tokens, self.scale)
                for level, p in (dist or {a.value[0]: 1.0}).items():
                    totals[level] = totals.get(level, 0.0) + p / len(good)
        expected = sum(level * p for level, p in totals.items())
        return JudgeVerdict(
            ok=True,
            score=self.scale.from_level(expected),
            reasons=good[0].value[1],
            raw=raw,
            probabilities={str(k): totals[k] for k in sorted(totals)},
            usage=usage,
        )

    def _known_level_probabilities(self, good: list[Attempt]) -> dict[int, float] | None:
        """G-Eval without top logprobs: each sampled answer that *begins* with its level carries
        the judge's exact probability of that level (the first token's logprob). Over ``n``
        samples at temperature 1 the levels seen, weighted by those probabilities (renormalised),
        estimate the expectation with far less noise than counting them. Answers that do not
        begin with their level, or were retried (conditioned on the retry), are left out;
        ``None`` when none qualifies.
        """
        if self.n < 2 or self.temperature != 1.0:
            return None
        seen: dict[int, float] = {}
        for a in good:
            reply = a.reply
            if reply is None or reply.first_token_logprob is None or a.usage.retries:
                continue
            level = first_token_level(reply.text, self.scale)
            if level is None or level != a.value[0]:
                continue
            seen[level] = math.exp(reply.first_token_logprob)
        mass = sum(seen.values())
        if not mass > 0.0:
            return None
        return {level: p / mass for level, p in seen.items()}

    async def grade(self, ctx: GraderContext[Any]) -> dict[str, JudgeVerdict]:
        """Score every sample in ``ctx`` (its final answer) and set the rewards.

        The row's prompt is the task and ``ctx.label`` the reference answer. Scores, reasons and
        judge costs are recorded on each sample (``metrics["judge_*"]``,
        ``extra_fields["judge"]``).

        Raises:
            JudgeError: some sample could not be judged; the rollout is recorded as a grader
                failure carrying the judge's raw reply (no reward is made up).
        """
        question = question_text(ctx.prompt) or None
        ids = list(ctx.samples)
        verdicts = await asyncio.gather(
            *(
                self.score(
                    final_text(ctx.samples[i].messages), question=question, reference=ctx.label
                )
                for i in ids
            )
        )
        out = dict(zip(ids, verdicts, strict=True))
        for sample_id, verdict in out.items():
            record_on_sample(ctx.samples[sample_id], verdict)
        failed = {i: v for i, v in out.items() if not v.ok}
        if failed:
            sample_id, verdict = next(iter(failed.items()))
            raise JudgeError(_failure_message(sample_id, verdict), verdict)
        for sample_id, verdict in out.items():
            assert verdict.score is not None
            ctx.set_sample_reward(sample_id, verdict.score)
        return out


def _failure_message(sample_id: str, verdict: JudgeVerdict) -> str:
    last = verdict.raw[-1] if verdict.raw else ""
    shown = last if len(last) <= 300 else last[:297] + "..."
    return f"judge failed on sample {sample_id!r}: {verdict.error}; last reply: {shown!r}"
