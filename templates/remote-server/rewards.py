"""The reward: does the final answer equal the ground truth?"""

from __future__ import annotations

import math
import re
from typing import Any

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


def final_text(messages: list[dict[str, Any]]) -> str:
    """The text of the last assistant message ("" when there is none)."""
    for message in reversed(messages):
        if message.get("role") == "assistant":
            content = message.get("content")
            return content if isinstance(content, str) else ""
    return ""


def compute_reward(solution: str, ground_truth: str) -> float:
    """1.0 when the last number in ``solution`` equals ``ground_truth``, else 0.0.

    Raises:
        ValueError: ``ground_truth`` is not a number (a dataset problem, not a wrong answer).
    """
    try:
        expected = float(str(ground_truth).replace(",", ""))
    except ValueError:
        raise ValueError(f"ground_truth {ground_truth!r} is not a number") from None
    numbers = _NUMBER.findall(solution)
    if not numbers:
        return 0.0
    try:
        answer = float(numbers[-1].replace(",", ""))
    except ValueError:
        return 0.0
    return 1.0 if math.isclose(answer, expected, rel_tol=1e-6, abs_tol=1e-9) else 0.0
