"""NumericAnswerGrader / score_number: the calculator templates' grader, tested once here."""

from __future__ import annotations

import pytest

from osmosis_ai.grading import NumericAnswerGrader, final_text, score_number
from osmosis_ai.rollout import GraderContext, RolloutSample


@pytest.mark.parametrize(
    ("reply", "label", "reward"),
    [
        ("42", "42", 1.0),
        (" 42. ", "42", 1.0),
        ("**42**", "42", 1.0),
        ("42.0", "42", 1.0),
        ("1,234", "1234", 1.0),
        ("-7", "-7", 1.0),
        ("The answer is 42.", "42", 0.5),
        ("17 + 25 = 42", "42", 0.5),
        ("42 because 17 + 25", "42", 0.0),  # the last number is taken as the answer
        ("1001", "1000", 0.2),  # within 1%: partial credit for a near miss
        ("41", "42", 0.0),
        ("I don't know", "42", 0.0),
        ("", "42", 0.0),
    ],
)
def test_partial_credit(reply: str, label: str, reward: float) -> None:
    assert score_number(reply, label) == reward


def test_a_non_numeric_label_is_an_error() -> None:
    with pytest.raises(ValueError, match="not a number"):
        score_number("42", "forty-two")


def test_final_text_reads_every_message_shape() -> None:
    assert (
        final_text([{"role": "user", "content": "q"}, {"role": "assistant", "content": "7"}]) == "7"
    )
    assert final_text([{"role": "assistant", "content": [{"text": "4"}, {"text": "2"}]}]) == "42"
    responses = [
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "9"}]}
    ]
    assert final_text(responses) == "9"
    assert final_text([{"role": "user", "content": "q"}]) == ""


def _ctx(label: str | None, replies: dict[str, str]) -> GraderContext:
    samples = {
        sid: RolloutSample(id=sid, messages=[{"role": "assistant", "content": text}])
        for sid, text in replies.items()
    }
    return GraderContext(samples=samples, label=label)


async def test_grader_rewards_each_sample_and_score_can_be_overridden() -> None:
    ctx = _ctx("42", {"a": "42", "b": "it is 42", "c": "no"})
    await NumericAnswerGrader().grade(ctx)
    assert {sid: s.reward for sid, s in ctx.samples.items()} == {"a": 1.0, "b": 0.5, "c": 0.0}

    class Strict(NumericAnswerGrader):
        def score(self, text: str, label: str) -> float:
            return float(text == label)

    ctx = _ctx("42", {"a": "42", "b": "it is 42"})
    await Strict().grade(ctx)
    assert {sid: s.reward for sid, s in ctx.samples.items()} == {"a": 1.0, "b": 0.0}


async def test_grader_without_a_label_says_what_is_missing() -> None:
    with pytest.raises(ValueError, match="ground_truth"):
        await NumericAnswerGrader().grade(_ctx(None, {"a": "1"}))
