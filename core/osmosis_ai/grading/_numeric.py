"""NumericAnswerGrader: the reply's final number against the row's ``ground_truth``.

The calculator templates grade with it, so their grader lives here once (tested here) instead
of being copied into every template.
"""

from __future__ import annotations

import math
import re
from typing import Any

from osmosis_ai.grading._prompts import final_text
from osmosis_ai.rollout import Grader, GraderContext

__all__ = ["NumericAnswerGrader", "score_number"]

_NUMBER_RE = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")
EXACT, EXTRA_TEXT, CLOSE = 1.0, 0.5, 0.2


def score_number(text: str, label: str) -> float:
    """Reward for one reply; deterministic, with honest partial credit.

    - 1.0: the reply is exactly the right number (spaces, a trailing period, or ``**``/``$``/
      backticks around it are allowed).
    - 0.5: the last number in the reply is right, but the reply has other text around it.
    - 0.2: the last number is wrong but within 1% of the right one (a rounding slip).
    - 0.0: no number at all, or a wrong one.

    Raises:
        ValueError: ``label`` is not a number.
    """
    expected = _to_number(label)
    if expected is None:
        raise ValueError(f"ground_truth {label!r} is not a number")
    bare = _to_number(text.strip().strip("*$` ").rstrip(".").strip())
    if bare is not None and math.isclose(bare, expected, rel_tol=1e-9, abs_tol=1e-9):
        return EXACT
    numbers = _NUMBER_RE.findall(text)
    last = _to_number(numbers[-1]) if numbers else None
    if last is None:
        return 0.0
    if math.isclose(last, expected, rel_tol=1e-9, abs_tol=1e-9):
        return EXTRA_TEXT
    if abs(last - expected) <= 0.01 * max(abs(expected), 1.0):
        return CLOSE
    return 0.0


def _to_number(text: str) -> float | None:
    try:
        value = float(text.replace(",", ""))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


class NumericAnswerGrader(Grader[Any]):
    """Scores each sample's final assistant text against the row's ``ground_truth`` with
    :func:`score_number`. Subclass it in your rollout (osmosis finds the ``Grader`` defined
    there), and override :meth:`score` to change the rule."""

    def score(self, text: str, label: str) -> float:
        return score_number(text, label)

    async def grade(self, ctx: GraderContext[Any]) -> None:
        if ctx.label is None:
            raise ValueError("this grader needs a ground_truth column in the dataset")
        for sample_id, sample in ctx.samples.items():
            ctx.set_sample_reward(sample_id, self.score(final_text(sample.messages), ctx.label))
