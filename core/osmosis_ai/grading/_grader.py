"""Ready graders: subclass, set a rubric string and a judge model, done.

::

    from osmosis_ai.grading import RubricGrader

    class SupportGrader(RubricGrader):
        rubric = "A good reply is polite, answers the question asked, and is under 80 words."
        judge_model = "openai/gpt-4o-mini"

The judge is built once per class (its cache and its usage totals are shared by every rollout).
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

from osmosis_ai.grading._base import JudgeBase, Mode
from osmosis_ai.grading._group import GroupJudge
from osmosis_ai.grading._rubric import RubricJudge
from osmosis_ai.grading._types import Scale
from osmosis_ai.rollout import Grader, GraderContext

__all__ = ["GroupJudgeGrader", "RubricGrader"]


class RubricGrader(Grader[Any]):
    """A grader that scores each sample with a :class:`RubricJudge`.

    Class attributes to set: ``rubric`` (required), ``judge_model`` (default ``"embedded"``;
    the environment variable named by ``judge_model_env``, when set, overrides it, so a
    hosted judge can be switched on without editing code), ``mode``, ``scale``, ``n``,
    ``max_concurrent``.
    """

    rubric: ClassVar[str] = ""
    judge_model: ClassVar[str] = "embedded"
    judge_model_env: ClassVar[str | None] = "OSMOSIS_JUDGE_MODEL"
    mode: ClassVar[Mode] = "json"
    scale: ClassVar[Scale] = Scale()
    n: ClassVar[int] = 1
    max_concurrent: ClassVar[int] = 8
    _judges: ClassVar[dict[tuple[type, str], JudgeBase]] = {}

    @classmethod
    def model_spec(cls) -> str:
        """The judge model to use: the environment override, else ``judge_model``."""
        env = os.environ.get(cls.judge_model_env) if cls.judge_model_env else None
        return env or cls.judge_model

    @classmethod
    def build_judge(cls, model: str) -> JudgeBase:
        return RubricJudge(
            cls.rubric,
            model=model,
            mode=cls.mode,
            scale=cls.scale,
            n=cls.n,
            max_concurrent=cls.max_concurrent,
        )

    @classmethod
    def judge(cls) -> JudgeBase:
        """This class's judge (built on first use, then shared)."""
        if not cls.rubric.strip():
            raise TypeError(f"{cls.__name__} must set the class attribute 'rubric'")
        model = cls.model_spec()
        key = (cls, model)
        if key not in RubricGrader._judges:
            RubricGrader._judges[key] = cls.build_judge(model)
        return RubricGrader._judges[key]

    async def grade(self, ctx: GraderContext[Any]) -> None:
        judge = self.judge()
        assert isinstance(judge, RubricJudge | GroupJudge)
        await judge.grade(ctx)


class GroupJudgeGrader(RubricGrader):
    """A grader that scores the samples of a row relative to each other (:class:`GroupJudge`).

    ``n`` is the number of judge calls per group (each sees another order of the responses).
    """

    @classmethod
    def build_judge(cls, model: str) -> JudgeBase:
        return GroupJudge(
            cls.rubric, model=model, scale=cls.scale, n=cls.n, max_concurrent=cls.max_concurrent
        )
