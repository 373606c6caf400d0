"""GroupJudge: one call sees every response of a group and scores them against each other.

This is the reward GRPO wants (ART's RULER idea): the advantage only needs the order within a
group, and a judge ranks side by side far more consistently than it scores alone. Position
bias is handled by order: responses are shuffled (seeded by the content, so a re-run asks the
same question) and, with ``n > 1``, each repeated call rotates the order so every response is
seen in different positions; its score is the mean over the calls.

In a rollout, ``judge.grade(ctx)`` gathers the ``ctx.n_samples`` rollouts of the same row (the
GRPO group; each rollout is graded separately by the runner) and judges them in one call.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Unpack

from osmosis_ai.grading._base import Attempt, JudgeBase, JudgeOptions, record_on_sample
from osmosis_ai.grading._cache import cache_key
from osmosis_ai.grading._model import JudgeModel
from osmosis_ai.grading._parse import parse_group
from osmosis_ai.grading._prompts import PROMPT_VERSION, final_text, group_messages, question_text
from osmosis_ai.grading._types import JudgeError, JudgeUsage, JudgeVerdict
from osmosis_ai.rollout import GraderContext

__all__ = ["GroupJudge", "rotations"]


def rotations(k: int, n: int, rng: random.Random) -> list[list[int]]:
    """``n`` presentation orders of ``k`` items: one shuffle, then evenly spaced rotations.

    ``orders[r][j]`` is the item shown at position ``j + 1`` in call ``r``. With ``n >= k`` every
    item takes every position; with fewer calls the positions are spread as far as they go.
    """
    base = list(range(k))
    rng.shuffle(base)
    out = []
    for r in range(n):
        shift = (r * k) // n
        out.append(base[shift:] + base[:shift])
    return out


@dataclass(eq=False)
class _Pending:
    """Responses of one group arriving from separate rollouts, judged once all are in."""

    expected: int
    question: str | None
    reference: str | None
    texts: list[str] = field(default_factory=list)
    done: asyncio.Future[list[JudgeVerdict]] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    started: bool = False


class GroupJudge(JudgeBase):
    """Score the responses of a group relative to each other, in one judge call per repeat.

    The judge answers ``{"scores": [{"id", "score", "reasons"}, ...]}`` (or ``"id: score"``
    lines); a reply that misses an id or leaves the scale is retried, then every response in
    the group is recorded as failed with the raw reply.

    Args:
        group_wait_s: in :meth:`grade`, how long a rollout waits for the rest of its group
            before the responses that arrived are judged without the missing ones (rollouts
            that failed never arrive). ``None``: wait for all (the grader timeout still applies).

    Other arguments (``scale``, ``n``, ``temperature``, ``max_tokens`` (default 512: a score
    per response), ``max_retries``, ``max_concurrent``, ``cache``, ``few_shot``): see
    :class:`~osmosis_ai.grading.JudgeBase`.
    """

    kind = "group"
    default_max_tokens = 512

    def __init__(
        self,
        rubric: str | Path,
        *,
        model: JudgeModel | str,
        group_wait_s: float | None = 60.0,
        **options: Unpack[JudgeOptions],
    ) -> None:
        super().__init__(rubric, model=model, **options)
        self.group_wait_s = group_wait_s
        self._pending: dict[Any, _Pending] = {}

    async def score_group(
        self, responses: list[str], *, question: str | None = None, reference: str | None = None
    ) -> list[JudgeVerdict]:
        """One verdict per response, in the order given (failures as verdicts, never raised)."""
        k = len(responses)
        if k == 0:
            return []
        # Sorted content: the same group in another order is the same question.
        order = sorted(range(k), key=lambda i: responses[i])
        key = cache_key(
            PROMPT_VERSION,
            *self._key_parts(),
            self.few_shot,
            question,
            reference,
            [responses[i] for i in order],
        )
        hit = self.cache.get(key) if self.cache is not None else None
        if hit is not None:
            self.usage.cache_hits += k
            by_sorted = [JudgeVerdict.model_validate({**p, "cached": True}) for p in hit]
            out: list[JudgeVerdict] = [by_sorted[0]] * k
            for rank, i in enumerate(order):
                out[i] = by_sorted[rank]
                out[i].usage = JudgeUsage(cache_hits=1)
            return out
        # Seeded by the content alone: the same group is shown in the same orders to any judge.
        seed = cache_key(question, reference, [responses[i] for i in order])
        orders = rotations(k, self.n, random.Random(seed))
        attempts = await asyncio.gather(
            *(
                self._ask(
                    group_messages(
                        self.rubric,
                        [responses[i] for i in shown],
                        self.scale,
                        question=question,
                        reference=reference,
                        few_shot=self.few_shot,
                    ),
                    partial(parse_group, k=k, scale=self.scale),
                    seed=r,
                )
                for r, shown in enumerate(orders)
            )
        )
        verdicts = _combine(k, orders, list(attempts))
        if self.cache is not None and all(v.ok for v in verdicts):
            self.cache.put(key, [verdicts[i].cache_payload() for i in order])
        return [self._finish(v) for v in verdicts]

    async def grade(self, ctx: GraderContext[Any]) -> dict[str, JudgeVerdict]:
        """Judge this rollout's samples within their group and set the rewards.

        With ``ctx.n_samples > 1`` each sample waits for the same sample id of the row's other
        rollouts, and one call judges them all. Otherwise the rollout's own samples are the
        group.

        Raises:
            JudgeError: the group could not be judged (the raw reply is in the message).
        """
        question = question_text(ctx.prompt) or None
        texts = {sid: final_text(s.messages) for sid, s in ctx.samples.items()}
        if ctx.row_index is None or ctx.n_samples <= 1:
            ids = list(texts)
            verdicts = await self.score_group(
                [texts[i] for i in ids], question=question, reference=ctx.label
            )
            out = dict(zip(ids, verdicts, strict=True))
        else:
            row_key = cache_key(ctx.row_index, ctx.prompt, ctx.label)
            joined = await asyncio.gather(
                *(
                    self._join((row_key, sid), ctx.n_samples, text, question, ctx.label)
                    for sid, text in texts.items()
                )
            )
            out = dict(zip(texts, joined, strict=True))
        for sample_id, verdict in out.items():
            record_on_sample(ctx.samples[sample_id], verdict)
        for sample_id, verdict in out.items():
            if not verdict.ok:
                last = verdict.raw[-1][:300] if verdict.raw else ""
                raise JudgeError(
                    f"group judge failed on sample {sample_id!r}: {verdict.error}; "
                    f"last reply: {last!r}",
                    verdict,
                )
        for sample_id, verdict in out.items():
            assert verdict.score is not None
            ctx.set_sample_reward(sample_id, verdict.score)
        return out

    async def _join(
        self, key: Any, expected: int, text: str, question: str | None, reference: str | None
    ) -> JudgeVerdict:
        pending = self._pending.get(key)
        if pending is None:
            pending = self._pending[key] = _Pending(expected, question, reference)
        index = len(pending.texts)
        pending.texts.append(text)
        if len(pending.texts) >= pending.expected:
            self._start(key, pending)
        try:
            await asyncio.wait_for(asyncio.shield(pending.done), self.group_wait_s)
        except TimeoutError:
            # The rest of the group is not coming (failed rollouts): judge those that came.
            self._start(key, pending)
            await pending.done
        return pending.done.result()[index]

    def _start(self, key: Any, pending: _Pending) -> None:
        if pending.started:
            return
        pending.started = True
        if self._pending.get(key) is pending:
            del self._pending[key]

        async def judge() -> None:
            try:
                verdicts = await self.score_group(
                    pending.texts, question=pending.question, reference=pending.reference
                )
            except BaseException as exc:  # handed to every waiting rollout
                pending.done.set_exception(exc)
                raise
            pending.done.set_result(verdicts)

        task = asyncio.get_running_loop().create_task(judge())
        task.add_done_callback(_consume)


def _consume(task: asyncio.Task[None]) -> None:
    if not task.cancelled():
        task.exception()  # reported through the waiters' future; do not log it twice


def _combine(k: int, orders: list[list[int]], attempts: list[Attempt]) -> list[JudgeVerdict]:
    usage = JudgeUsage()
    for a in attempts:
        usage.add(a.usage)
    raw = [text for a in attempts for text in a.raw]
    good = [(shown, a) for shown, a in zip(orders, attempts, strict=True) if a.ok]
    if not good:
        error = attempts[0].error
        return [
            JudgeVerdict(ok=False, error=error, raw=raw, usage=usage if i == 0 else JudgeUsage())
            for i in range(k)
        ]
    verdicts = []
    for i in range(k):
        scores: list[float] = []
        positions: list[int] = []
        reasons = ""
        for shown, a in good:
            pos = shown.index(i) + 1
            score, why = a.value[pos]
            scores.append(score)
            positions.append(pos)
            reasons = reasons or why
        verdicts.append(
            JudgeVerdict(
                ok=True,
                score=sum(scores) / len(scores),
                reasons=reasons,
                raw=raw if i == 0 else [],
                positions=positions,
                # The calls' cost is booked once, on the first response, so sums stay right.
                usage=usage if i == 0 else JudgeUsage(),
            )
        )
    return verdicts
