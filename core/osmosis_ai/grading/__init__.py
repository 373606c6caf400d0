"""Graders beyond exact match: LLM judges, on a rubric or relative within a GRPO group.

- :class:`RubricJudge`: one response against a rubric (text or file) on a declared
  :class:`Scale`, with an optional reference answer; returns the score and the judge's reasons.
  ``mode="levels"`` reads a G-Eval-style score from the judge's level probabilities.
- :class:`GroupJudge`: all responses of a group in one call, scored against each other, the
  order shuffled and rotated across repeated calls.
- :class:`JudgeModel`: the judge's model (``"embedded"`` / a local folder served by osmosis's
  own engine, an OpenAI-compatible URL, or a LiteLLM id); never the policy unless you say so.
- :class:`RubricGrader`, :class:`GroupJudgeGrader`: ready ``Grader`` classes taking a rubric
  string.
- :func:`judge_answers`: a dataset's existing answers scored by a judge (``osmosis eval rubric``).
- :class:`NumericAnswerGrader` (:func:`score_number`): the final number against the row's
  ``ground_truth``, with partial credit (the calculator templates' grader).

Judgements are cached (:class:`JudgeCache`, keyed by judge model, rubric and content), calls run
concurrently under a limit, and every verdict carries its token and cost usage
(:class:`JudgeUsage`). A judge that cannot be read after bounded retries gives a failed
:class:`JudgeVerdict` with the raw reply (``grade(ctx)`` raises :class:`JudgeError`), never 0.0.
"""

from __future__ import annotations

from osmosis_ai.grading._answers import AnswersResult, judge_answers
from osmosis_ai.grading._base import JudgeBase, read_rubric
from osmosis_ai.grading._cache import JudgeCache
from osmosis_ai.grading._grader import GroupJudgeGrader, RubricGrader
from osmosis_ai.grading._group import GroupJudge
from osmosis_ai.grading._model import JudgeModel, JudgeModelError, JudgeReply
from osmosis_ai.grading._numeric import NumericAnswerGrader, score_number
from osmosis_ai.grading._parse import MalformedAnswer
from osmosis_ai.grading._prompts import final_text
from osmosis_ai.grading._rubric import RubricJudge
from osmosis_ai.grading._types import JudgeError, JudgeUsage, JudgeVerdict, Scale

__all__ = [
    "AnswersResult",
    "GroupJudge",
    "GroupJudgeGrader",
    "JudgeBase",
    "JudgeCache",
    "JudgeError",
    "JudgeModel",
    "JudgeModelError",
    "JudgeReply",
    "JudgeUsage",
    "JudgeVerdict",
    "MalformedAnswer",
    "NumericAnswerGrader",
    "RubricGrader",
    "RubricJudge",
    "Scale",
    "final_text",
    "judge_answers",
    "read_rubric",
    "score_number",
]
