"""The embedded SmolLM2-135M-Instruct as a real local judge (offline): scores on the scale and
reasons, in both answer modes. Slow: the model loads and generates on the CPU."""

from __future__ import annotations

import pytest

from osmosis_ai.grading import JudgeModel, RubricJudge, Scale

pytestmark = pytest.mark.slow

RUBRIC = "A good reply is polite and tells the user exactly which button to press."
QUESTION = "How do I reset my password?"
ANSWERS = [
    "Click 'Forgot password' on the login page, then follow the link in the email.",
    "I don't know, figure it out yourself.",
    "Go to Settings and press 'Reset password'. Happy to help!",
]


async def test_embedded_judge_scores_on_the_scale_with_reasons() -> None:
    model = JudgeModel("embedded")
    try:
        levels = RubricJudge(
            RUBRIC, model=model, mode="levels", n=3, scale=Scale(min=0, max=10), max_tokens=32
        )
        for answer in ANSWERS:
            verdict = await levels.score(answer, question=QUESTION)
            assert verdict.ok, verdict.raw
            assert verdict.score is not None and 0.0 <= verdict.score <= 10.0
            assert verdict.reasons.strip(), verdict.raw
            assert verdict.probabilities and abs(sum(verdict.probabilities.values()) - 1) < 1e-9
            assert verdict.usage.calls >= 3 and verdict.usage.cost_usd == 0.0
        greedy = RubricJudge(RUBRIC, model=model, mode="json", max_tokens=48)
        verdicts = [await greedy.score(a, question=QUESTION) for a in ANSWERS]
        ok = [v for v in verdicts if v.ok]
        assert len(ok) >= 2, [v.raw for v in verdicts]
        for v in ok:
            assert v.score is not None and 0.0 <= v.score <= 1.0 and v.reasons.strip()
        # A failure, if any, is data with the raw replies, not a zero.
        for v in verdicts:
            assert v.ok or (v.score is None and v.raw)
        again = await greedy.score(ANSWERS[0], question=QUESTION)
        assert again.cached == verdicts[0].ok  # judged once; failures are not cached
    finally:
        await model.aclose()


async def test_embedded_judges_level_is_its_first_token() -> None:
    """The premise of levels mode on our engines: an answer that begins with its level digit
    was sampled with that digit as its first token, so the first logprob is P(level)."""
    from osmosis_ai.grading._prompts import rubric_messages
    from osmosis_ai.serving import GenerationRequest, create_engine
    from osmosis_trainer.models import load_model

    engine = create_engine("embedded")
    tokenizer = load_model("embedded").tokenizer
    messages = rubric_messages(RUBRIC, ANSWERS[2], Scale(), mode="levels", few_shot=True)
    try:
        begun = 0
        for seed in range(8):
            req = GenerationRequest(messages=messages, temperature=1.0, max_tokens=4, seed=seed)
            result = await engine.generate(req)
            assert result.completion_token_ids and result.logprobs
            if result.text[:1].isdigit() and not result.text[1:2].isdigit():
                begun += 1
                assert tokenizer.decode([result.completion_token_ids[0]]) == result.text[0]
        assert begun >= 4  # with the worked examples, most answers begin with the level
    finally:
        await engine.close()
