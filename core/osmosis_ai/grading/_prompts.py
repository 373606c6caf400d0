"""The judge's prompts (pure functions). ``PROMPT_VERSION`` enters every cache key."""

from __future__ import annotations

import json
from typing import Any

from osmosis_ai.grading._types import Scale
from osmosis_ai.rollout import Message

__all__ = [
    "PROMPT_VERSION",
    "final_text",
    "group_messages",
    "question_text",
    "retry_messages",
    "rubric_messages",
]

PROMPT_VERSION = "1"


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict):
                parts.append(str(part.get("text", "")))
            elif isinstance(part, str):
                parts.append(part)
        return "".join(parts)
    return str(content)


def final_text(messages: list[Any]) -> str:
    """The text of the last assistant message (chat dicts, Strands blocks, Responses items)."""
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "assistant":
            return _text(message.get("content"))
    return ""


def question_text(prompt: list[Message]) -> str:
    """The row's user turns, joined (what the response answers)."""
    return "\n\n".join(_text(m.get("content")) for m in prompt if m.get("role") == "user")


def _scale_words(scale: Scale) -> str:
    return f"a number from {scale.min:g} (worst) to {scale.max:g} (best)"


def _task_block(question: str | None, reference: str | None) -> str:
    block = f"TASK:\n{question.strip()}\n\n" if question else ""
    if reference:
        block += f"REFERENCE ANSWER (a correct answer, for comparison):\n{reference.strip()}\n\n"
    return block


def _answer(mode: str, scale: Scale, good: bool, why: str) -> str:
    if mode == "json":
        score = scale.max if good else scale.min
        return json.dumps({"score": score, "reasons": why})
    return f"{scale.levels if good else 1} - {why}"


def _examples(mode: str, scale: Scale) -> list[Message]:
    """Two worked examples, one good and one bad: small judges copy the answer format."""
    rubric = "The reply must name the capital of France."
    out: list[Message] = []
    for response, good, why in (
        ("The capital of France is Paris.", True, "it names the capital correctly."),
        ("I like turtles.", False, "it does not answer the question."),
    ):
        out.append(
            {"role": "user", "content": f"RUBRIC:\n{rubric}\n\nRESPONSE:\n{response}\n\nScore:"}
        )
        out.append({"role": "assistant", "content": _answer(mode, scale, good, why)})
    return out


def rubric_messages(
    rubric: str,
    response: str,
    scale: Scale,
    *,
    mode: str,
    question: str | None = None,
    reference: str | None = None,
    few_shot: bool = False,
) -> list[Message]:
    """Messages asking for one response's score against ``rubric``.

    ``few_shot`` adds two worked examples before the question (small local judges follow the
    format far more often with them; hosted ones do not need the extra tokens).
    """
    if mode == "json":
        answer = (
            'Reply with only a JSON object: {"score": <' + _scale_words(scale) + ">, "
            '"reasons": "<one or two sentences citing the rubric>"}'
        )
    else:
        answer = (
            f"Reply with a single digit from 1 to {scale.levels} (1 = fails the rubric, "
            f"{scale.levels} = fully meets it), then a short reason. Example: "
            f"{max(1, scale.levels - 1)} - clear and correct, but it misses one point."
        )
    system = "You are a strict, fair grader. Judge the RESPONSE against the RUBRIC only. " + answer
    user = (
        f"RUBRIC:\n{rubric.strip()}\n\n{_task_block(question, reference)}"
        f"RESPONSE:\n{response.strip()}\n\nScore:"
    )
    shots = _examples(mode, scale) if few_shot else []
    return [{"role": "system", "content": system}, *shots, {"role": "user", "content": user}]


def _group_example(scale: Scale) -> list[Message]:
    user = (
        "RUBRIC:\nThe reply must name the capital of France.\n\n"
        "RESPONSE 1:\nI like turtles.\n\nRESPONSE 2:\nThe capital of France is Paris.\n\nScores:"
    )
    answer = {
        "scores": [
            {"id": 1, "score": scale.min, "reasons": "it does not answer."},
            {"id": 2, "score": scale.max, "reasons": "it names Paris."},
        ]
    }
    return [{"role": "user", "content": user}, {"role": "assistant", "content": json.dumps(answer)}]


def group_messages(
    rubric: str,
    responses: list[str],
    scale: Scale,
    *,
    question: str | None = None,
    reference: str | None = None,
    few_shot: bool = False,
) -> list[Message]:
    """Messages asking for scores of several responses to one task, relative to each other."""
    k = len(responses)
    listing = "\n\n".join(f"RESPONSE {i}:\n{r.strip()}" for i, r in enumerate(responses, 1))
    system = (
        "You are a strict, fair grader comparing several responses to the same task. Judge them "
        "against the RUBRIC and against each other: a better response gets a higher score, and "
        "responses of different quality get different scores. Give each "
        f"{_scale_words(scale)}. Reply with only a JSON object: "
        '{"scores": [{"id": 1, "score": <number>, "reasons": "<one sentence>"}, ...]} '
        f"with one entry for every id from 1 to {k}."
    )
    user = f"RUBRIC:\n{rubric.strip()}\n\n{_task_block(question, reference)}{listing}\n\nScores:"
    shots = _group_example(scale) if few_shot else []
    return [{"role": "system", "content": system}, *shots, {"role": "user", "content": user}]


def retry_messages(messages: list[Message], bad_reply: str, problem: str) -> list[Message]:
    """The conversation plus the refused reply and what was wrong with it."""
    return [
        *messages,
        {"role": "assistant", "content": bad_reply},
        {
            "role": "user",
            "content": f"That answer could not be used: {problem}. Answer again, in the "
            "required format only.",
        },
    ]
