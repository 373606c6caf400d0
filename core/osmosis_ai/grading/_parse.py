"""Reading a judge's reply (pure functions): JSON verdicts, level digits, level probabilities.

Each parser returns the parsed value or raises :class:`MalformedAnswer` with a message the
judge can be shown on a retry ("the score 7 is outside 0..1").
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError

from osmosis_ai.grading._types import Scale

__all__ = [
    "GroupAnswer",
    "MalformedAnswer",
    "RubricAnswer",
    "extract_json",
    "first_token_level",
    "level_distribution",
    "parse_group",
    "parse_level",
    "parse_rubric_json",
]


class MalformedAnswer(ValueError):
    """The judge's reply cannot be read; the message says why (shown to the judge on retry)."""


_REASON_KEYS = AliasChoices("reasons", "reason", "explanation", "rationale", "justification")


class RubricAnswer(BaseModel):
    """The JSON a rubric judge writes: ``{"score": 0.8, "reasons": "..."}``."""

    model_config = ConfigDict(extra="ignore")

    score: float = Field(allow_inf_nan=False)
    reasons: str = Field(default="", validation_alias=_REASON_KEYS)


class _GroupItem(BaseModel):
    model_config = ConfigDict(extra="ignore")

    id: int = Field(validation_alias=AliasChoices("id", "response", "index", "sample"))
    score: float = Field(allow_inf_nan=False)
    reasons: str = Field(default="", validation_alias=_REASON_KEYS)


class GroupAnswer(BaseModel):
    """The JSON a group judge writes: ``{"scores": [{"id": 1, "score": 0.5, "reasons": ...}]}``."""

    model_config = ConfigDict(extra="ignore")

    scores: list[_GroupItem]


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


def extract_json(text: str) -> Any:
    """The first JSON object in ``text`` (inside a code fence or among other words)."""
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    decoder = json.JSONDecoder()
    for chunk in candidates:
        for start in (i for i, ch in enumerate(chunk) if ch == "{"):
            try:
                value, _ = decoder.raw_decode(chunk, start)
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict):
                return value
    raise MalformedAnswer("the reply holds no JSON object")


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err.get("loc", ()))
    return f"{loc or 'answer'}: {err.get('msg', 'invalid')}"


def parse_rubric_json(text: str, scale: Scale) -> RubricAnswer:
    """A validated ``{"score", "reasons"}`` answer whose score lies on ``scale``."""
    try:
        answer = RubricAnswer.model_validate(extract_json(text))
    except ValidationError as exc:
        raise MalformedAnswer(f"invalid JSON answer ({_first_error(exc)})") from None
    if not scale.contains(answer.score):
        raise MalformedAnswer(f"the score {answer.score:g} is outside {scale.min:g}..{scale.max:g}")
    return answer


_LEVEL = re.compile(r"(?<![\d.])([1-9])(?![\d.]\d)")


def parse_level(text: str, scale: Scale) -> tuple[int, str]:
    """The first whole level ``1..levels`` in the reply, and the words after it as reasons."""
    for match in _LEVEL.finditer(text):
        level = int(match.group(1))
        if 1 <= level <= scale.levels:
            reasons = text[match.end() :].strip(" \t\n-:.,)*/")
            return level, reasons
    raise MalformedAnswer(f"the reply names no level from 1 to {scale.levels}")


def first_token_level(text: str, scale: Scale) -> int | None:
    """The level when the reply *begins* with it (one digit, then no other digit).

    Then the reply's first generated token is the level digit (tokenizers split digits) and its
    logprob is the judge's probability of that level.
    """
    if len(text) >= 1 and text[0].isdigit() and not (len(text) > 1 and text[1].isdigit()):
        level = int(text[0])
        return level if 1 <= level <= scale.levels else None
    return None


def level_distribution(
    top_logprobs: list[dict[str, float]], sampled: list[str], scale: Scale
) -> dict[int, float] | None:
    """G-Eval: the judge's probabilities of each level at the token where it wrote its level.

    The level token is the first generated token that is a level digit; the probabilities of
    the level digits among that position's top candidates are renormalised to sum to 1.
    ``None`` when no generated token is a level.
    """
    valid = {str(i) for i in range(1, scale.levels + 1)}
    for i, token in enumerate(sampled):
        if token.strip() not in valid or i >= len(top_logprobs):
            continue
        mass: dict[int, float] = {}
        for cand, lp in top_logprobs[i].items():
            key = cand.strip()
            if key in valid and math.isfinite(lp):
                mass[int(key)] = mass.get(int(key), 0.0) + math.exp(lp)
        total = sum(mass.values())
        if total <= 0.0:
            return None
        return {level: p / total for level, p in sorted(mass.items())}
    return None


_GROUP_LINE = re.compile(
    r"^\s*(?:response|sample|answer)?\s*#?\s*(\d+)\s*[:=)\].-]\s*(-?\d+(?:\.\d+)?)\s*(.*)$",
    re.IGNORECASE | re.MULTILINE,
)


def parse_group(text: str, k: int, scale: Scale) -> dict[int, tuple[float, str]]:
    """Scores for responses ``1..k``: ``{id: (score, reasons)}``.

    Reads the JSON form first, then ``"2: 0.7 - reason"`` lines (small judges write those more
    reliably). Every id must be scored once, on the scale.
    """
    found: dict[int, tuple[float, str]] = {}
    try:
        answer = GroupAnswer.model_validate(extract_json(text))
        for item in answer.scores:
            found.setdefault(item.id, (item.score, item.reasons))
    except (MalformedAnswer, ValidationError):
        for match in _GROUP_LINE.finditer(text):
            found.setdefault(int(match.group(1)), (float(match.group(2)), match.group(3).strip()))
    if not found:
        raise MalformedAnswer(
            'the reply holds neither {"scores": [...]} JSON nor "id: score" lines'
        )
    missing = [i for i in range(1, k + 1) if i not in found]
    if missing:
        raise MalformedAnswer(f"responses {missing} have no score (score every id 1..{k})")
    for i in range(1, k + 1):
        score = found[i][0]
        if not scale.contains(score):
            raise MalformedAnswer(
                f"response {i}: the score {score:g} is outside {scale.min:g}..{scale.max:g}"
            )
    return {i: found[i] for i in range(1, k + 1)}
