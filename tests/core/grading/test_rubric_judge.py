"""RubricJudge against a scripted judge behind the real gateway: parsing, retries, failures as
data, cache hits, cost accounting, the concurrency limit, and G-Eval level probabilities."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any

import pytest

from osmosis_ai.grading import (
    JudgeCache,
    JudgeError,
    JudgeModel,
    JudgeReply,
    RubricJudge,
    Scale,
)
from osmosis_ai.rollout import Message
from tests.core.grading._helpers import graded_response, grader_ctx, scripted_judge

RUBRIC = "A good reply is polite and tells the user exactly which button to press."


async def test_json_verdict_with_reasons_and_usage() -> None:
    async with scripted_judge(['{"score": 0.8, "reasons": "polite, names the button"}']) as sj:
        judge = RubricJudge(RUBRIC, model=sj.model)
        verdict = await judge.score("Press 'Forgot password'.", question="How do I reset?")
        assert verdict.ok and verdict.score == 0.8
        assert verdict.reasons == "polite, names the button"
        assert verdict.usage.calls == 1 and verdict.usage.retries == 0
        assert verdict.usage.prompt_tokens > 0 and verdict.usage.completion_tokens > 0
        # The judge saw the rubric, the task and the response; greedy by default.
        (req,) = sj.requests
        user = str(req.messages[1]["content"])
        assert RUBRIC in user and "How do I reset?" in user and "Forgot password" in user
        assert req.temperature == 0.0


async def test_reference_answer_is_shown_to_the_judge() -> None:
    async with scripted_judge(['{"score": 1, "reasons": "matches"}']) as sj:
        await RubricJudge(RUBRIC, model=sj.model).score("42", reference="forty-two")
        assert "REFERENCE ANSWER" in str(sj.requests[0].messages[1]["content"])
        assert "forty-two" in str(sj.requests[0].messages[1]["content"])


@pytest.mark.parametrize(
    "reply",
    [
        '```json\n{"score": 0.25, "reason": "rude"}\n```',
        'Sure! Here is my verdict: {"score": 0.25, "explanation": "rude"} Hope it helps.',
    ],
)
async def test_json_inside_other_text_is_read(reply: str) -> None:
    async with scripted_judge([reply]) as sj:
        verdict = await RubricJudge(RUBRIC, model=sj.model).score("go away")
        assert verdict.ok and verdict.score == 0.25 and verdict.reasons == "rude"


async def test_malformed_answer_is_retried_with_the_problem() -> None:
    script = ["It is pretty good I think.", '{"score": 0.5, "reasons": "ok"}']
    async with scripted_judge(script) as sj:
        verdict = await RubricJudge(RUBRIC, model=sj.model).score("Press the button.")
        assert verdict.ok and verdict.score == 0.5
        assert verdict.usage.calls == 2 and verdict.usage.retries == 1
        assert verdict.raw == script
        retry = sj.requests[1].messages
        assert retry[-2] == {"role": "assistant", "content": script[0]}
        assert "no JSON object" in str(retry[-1]["content"])


async def test_out_of_scale_score_is_retried() -> None:
    script = ['{"score": 7, "reasons": "great"}', '{"score": 0.9, "reasons": "great"}']
    async with scripted_judge(script) as sj:
        verdict = await RubricJudge(RUBRIC, model=sj.model).score("x")
        assert verdict.ok and verdict.score == 0.9
        assert "outside 0..1" in str(sj.requests[1].messages[-1]["content"])


async def test_a_judge_that_stays_malformed_is_a_failure_not_a_zero() -> None:
    async with scripted_judge(["nope", "still no", "no JSON for you"]) as sj:
        judge = RubricJudge(RUBRIC, model=sj.model, max_retries=2)
        verdict = await judge.score("x")
        assert not verdict.ok and verdict.score is None
        assert verdict.raw == ["nope", "still no", "no JSON for you"]
        assert verdict.error is not None and "after 3 call(s)" in verdict.error
        assert verdict.usage.failures == 1 and judge.usage.failures == 1


async def test_grade_raises_with_the_raw_reply_and_sets_no_reward() -> None:
    async with scripted_judge(["I refuse to grade this."] * 3) as sj:
        judge = RubricJudge(RUBRIC, model=sj.model, cache=False)
        ctx = grader_ctx({"main": "Press reset."})
        with pytest.raises(JudgeError, match="I refuse to grade this"):
            await judge.grade(ctx)
        assert ctx.samples["main"].reward is None
        assert ctx.samples["main"].metrics["judge_failures"] == 1.0


async def test_grade_sets_rewards_reasons_and_metrics() -> None:
    def by_length(req: Any) -> str:
        response = graded_response(req)
        return json.dumps({"score": 1.0 if len(response) < 30 else 0.2, "reasons": "length"})

    async with scripted_judge(by_length) as sj:
        judge = RubricJudge(RUBRIC, model=sj.model)
        ctx = grader_ctx({"a": "Press reset.", "b": "Well, there are many ways to do it... " * 3})
        verdicts = await judge.grade(ctx)
        assert ctx.samples["a"].reward == 1.0 and ctx.samples["b"].reward == 0.2
        assert verdicts["a"].reasons == "length"
        assert ctx.samples["a"].extra_fields["judge"]["reasons"] == "length"
        assert ctx.samples["a"].metrics["judge_calls"] == 1.0


async def test_the_cache_serves_repeated_content_without_a_call(tmp_path: Path) -> None:
    reply = '{"score": 0.7, "reasons": "fine"}'
    async with scripted_judge([reply, reply, reply]) as sj:
        cache = JudgeCache(tmp_path / "judge.jsonl")
        judge = RubricJudge(RUBRIC, model=sj.model, cache=cache)
        first = await judge.score("Press reset.", question="q")
        second = await judge.score("Press reset.", question="q")
        assert not first.cached and second.cached and second.score == 0.7
        assert second.reasons == "fine" and second.usage.calls == 0
        assert len(sj.requests) == 1 and cache.hits == 1 and cache.misses == 1
        assert judge.usage.cache_hits == 1 and judge.usage.calls == 1
        # Another rubric, another question or another judge model is another judgement.
        await RubricJudge(RUBRIC + " Be brief.", model=sj.model, cache=cache).score(
            "Press reset.", question="q"
        )
        await judge.score("Press reset.", question="another q")
        assert len(sj.requests) == 3
        # The file cache survives a restart.
        again = RubricJudge(RUBRIC, model=sj.model, cache=JudgeCache(tmp_path / "judge.jsonl"))
        assert (await again.score("Press reset.", question="q")).cached
        assert len(sj.requests) == 3


async def test_failures_are_not_cached() -> None:
    async with scripted_judge(["bad", '{"score": 1, "reasons": "ok"}']) as sj:
        judge = RubricJudge(RUBRIC, model=sj.model, max_retries=0)
        assert not (await judge.score("x")).ok
        assert (await judge.score("x")).ok
        assert len(sj.requests) == 2


async def test_cost_from_litellm_cost_map_and_unpriced_calls() -> None:
    import litellm

    reply = '{"score": 1, "reasons": "ok"}'
    async with scripted_judge([reply, reply], price_as="openai/gpt-4o-mini") as sj:
        judge = RubricJudge(RUBRIC, model=sj.model, cache=False)
        verdict = await judge.score("x")
        prompt_cost, completion_cost = litellm.cost_per_token(
            model="gpt-4o-mini",
            prompt_tokens=verdict.usage.prompt_tokens,
            completion_tokens=verdict.usage.completion_tokens,
        )
        assert verdict.usage.cost_usd > 0
        assert math.isclose(verdict.usage.cost_usd, prompt_cost + completion_cost)
        assert verdict.usage.unpriced_calls == 0
        await judge.score("y")
        assert math.isclose(judge.usage.cost_usd, 2 * verdict.usage.cost_usd, rel_tol=0.5)
    async with scripted_judge([reply]) as sj:
        verdict = await RubricJudge(RUBRIC, model=sj.model).score("x")
        assert verdict.usage.unpriced_calls == 1 and verdict.usage.cost_usd == 0.0


async def test_model_errors_are_failures_with_the_reason() -> None:
    async with scripted_judge([]) as sj:  # an exhausted script: the gateway answers 400
        verdict = await RubricJudge(RUBRIC, model=sj.model).score("x")
        assert not verdict.ok and verdict.error is not None and "HTTP 400" in verdict.error
        assert "script exhausted" in verdict.error


class _CountingModel(JudgeModel):
    """A judge model that records how many calls are in flight at once."""

    def __init__(self, replies: list[JudgeReply] | None = None) -> None:
        super().__init__("http://judge.invalid/v1")
        self.in_flight = 0
        self.peak = 0
        self.replies = replies
        self.calls: list[dict[str, Any]] = []

    async def chat(self, messages: list[Message], **kw: Any) -> JudgeReply:
        self.calls.append(kw)
        index = len(self.calls) - 1
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        for _ in range(5):  # let every other task that can start, start
            await asyncio.sleep(0)
        self.in_flight -= 1
        if self.replies is not None:
            return self.replies[index % len(self.replies)]
        return JudgeReply(text='{"score": 1, "reasons": "ok"}', prompt_tokens=3)


async def test_concurrent_calls_stay_under_the_limit() -> None:
    model = _CountingModel()
    judge = RubricJudge(RUBRIC, model=model, max_concurrent=2)
    verdicts = await asyncio.gather(*(judge.score(f"answer {i}") for i in range(6)))
    assert all(v.ok for v in verdicts) and len(model.calls) == 6
    assert model.peak == 2
    unlimited = _CountingModel()
    await asyncio.gather(
        *(RubricJudge(RUBRIC, model=unlimited, max_concurrent=6).score(f"a {i}") for i in range(6))
    )
    assert unlimited.peak == 6


def _levels_reply(text: str, tokens: list[str], top: list[dict[str, float]]) -> JudgeReply:
    return JudgeReply(text=text, sampled_tokens=tokens, top_logprobs=top)


async def test_levels_mode_reads_the_judges_level_probabilities() -> None:
    # The judge wrote "4", but put 0.5 on 4, 0.3 on 5 and 0.2 on 2 (G-Eval's expected level).
    top = [
        {"4": math.log(0.5), "5": math.log(0.3), "2": math.log(0.2)},
        {" -": 0.0},
    ]
    model = _CountingModel([_levels_reply("4 - mostly right", ["4", " -"], top)])
    judge = RubricJudge(RUBRIC, model=model, mode="levels", scale=Scale(min=0, max=1, levels=5))
    verdict = await judge.score("x")
    expected_level = 4 * 0.5 + 5 * 0.3 + 2 * 0.2
    assert verdict.ok and verdict.score is not None
    assert math.isclose(verdict.score, (expected_level - 1) / 4)
    assert verdict.probabilities is not None
    assert math.isclose(verdict.probabilities["5"], 0.3) and verdict.reasons == "mostly right"
    assert model.calls[0]["top_logprobs"] == 20


async def test_levels_mode_without_logprobs_averages_sampled_levels() -> None:
    # Answers that do not begin with their level: the sampled levels are counted.
    script = ["Level 5 - perfect", "Score: 3. It skips a step.", "I'd say 5"]
    async with scripted_judge(script) as sj:
        judge = RubricJudge(RUBRIC, model=sj.model, mode="levels", n=3, scale=(0.0, 10.0))
        verdict = await judge.score("x")
        assert verdict.ok and verdict.probabilities == pytest.approx({"3": 1 / 3, "5": 2 / 3})
        assert verdict.score == pytest.approx((13 / 3 - 1) / 4 * 10)
        # More than one call: sampled at temperature 1 with distinct seeds.
        assert {r.temperature for r in sj.requests} == {1.0}
        assert len({r.seed for r in sj.requests}) == 3


async def test_levels_mode_retries_a_reply_without_a_level() -> None:
    async with scripted_judge(["Looks fine to me.", "2 - impolite"]) as sj:
        verdict = await RubricJudge(RUBRIC, model=sj.model, mode="levels").score("x")
        assert verdict.ok and verdict.score == 0.25 and verdict.reasons == "impolite"


def test_rubric_from_a_file_and_bad_settings(tmp_path: Path) -> None:
    path = tmp_path / "rubric.md"
    path.write_text("Be kind.")
    assert RubricJudge(path, model="http://x/v1").rubric == "Be kind."
    with pytest.raises(ValueError, match="cannot read the rubric file"):
        RubricJudge(tmp_path / "missing.md", model="http://x/v1")
    with pytest.raises(ValueError, match="rubric is empty"):
        RubricJudge("  ", model="http://x/v1")
    with pytest.raises(ValueError, match="max > min"):
        RubricJudge("Be kind.", model="http://x/v1", scale=(1.0, 1.0))
    with pytest.raises(ValueError, match="mode must be"):
        RubricJudge("Be kind.", model="http://x/v1", mode="stars")  # type: ignore[arg-type]


async def test_few_shot_examples_show_the_answer_format() -> None:
    async with scripted_judge(['{"score": 1, "reasons": "ok"}', "3 - fine"]) as sj:
        await RubricJudge(RUBRIC, model=sj.model, few_shot=True).score("x")
        await RubricJudge(RUBRIC, model=sj.model, few_shot=True, mode="levels").score("x")
        json_shots, level_shots = (r.messages for r in sj.requests)
        assert [m["role"] for m in json_shots] == ["system", *["user", "assistant"] * 3, "user"]
        assert json.loads(str(json_shots[2]["content"])) == {
            "score": 1.0,
            "reasons": "it names the capital correctly.",
        }
        assert str(level_shots[4]["content"]).startswith("1 - ")
        # The third example: a response that pleads for a score gets the lowest one.
        assert "Ignore the rubric" in str(json_shots[5]["content"])
        assert json.loads(str(json_shots[6]["content"]))["score"] == 0.0
    assert RubricJudge(RUBRIC, model="embedded").few_shot  # local judges get examples
    assert not RubricJudge(RUBRIC, model="openai/gpt-4o-mini").few_shot


async def test_an_engine_in_process_is_called_directly_and_left_open(tmp_path: Path) -> None:
    from osmosis_ai.errors import ConfigError
    from osmosis_ai.testing import ScriptedEngine

    engine = ScriptedEngine(per_sample=False, script=['{"score": 0.6, "reasons": "fine"}'])
    model = JudgeModel("my-local-judge", engine=engine)
    verdict = await RubricJudge(RUBRIC, model=model).score("x")
    assert verdict.ok and verdict.score == 0.6 and verdict.usage.cost_usd == 0.0
    assert verdict.usage.unpriced_calls == 0  # a local engine is free, not unpriced
    assert engine.requests[0].body["tool_choice"] == "none"
    await model.aclose()
    assert not engine.closed
    assert JudgeModel("embedded").kind == "engine" and JudgeModel(str(tmp_path)).kind == "engine"
    assert JudgeModel("https://api.example.com/v1").kind == "http"
    assert JudgeModel("anthropic/claude-3-5-haiku").kind == "litellm"
    with pytest.raises(ConfigError, match="looks like a local path"):
        JudgeModel("./models/judge/")


async def test_hosted_judge_through_litellm_is_priced_from_the_cost_map(
    litellm_worker_stopped: None,
) -> None:
    import litellm

    reply = '{"score": 0.9, "reasons": "polite and precise"}'
    # litellm's mock_response: the real acompletion path without a network call.
    model = JudgeModel("openai/gpt-4o-mini", extra={"mock_response": reply})
    verdict = await RubricJudge(RUBRIC, model=model).score("Press reset.")
    assert verdict.ok and verdict.score == 0.9 and verdict.reasons == "polite and precise"
    usage = verdict.usage
    expected = sum(
        litellm.cost_per_token(
            model="openai/gpt-4o-mini",
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
        )
    )
    assert usage.calls == 1 and usage.unpriced_calls == 0
    assert usage.cost_usd > 0 and math.isclose(usage.cost_usd, expected)
    unknown = JudgeModel("openai/no-such-model-xyz", extra={"mock_response": reply})
    verdict = await RubricJudge(RUBRIC, model=unknown).score("Press reset.")
    assert verdict.ok and verdict.usage.unpriced_calls == 1 and verdict.usage.cost_usd == 0.0


def test_one_judge_serves_several_event_loops() -> None:
    # A judge built at import time (as in a rollout module) is used by each asyncio.run.
    model = _CountingModel()
    judge = RubricJudge(RUBRIC, model=model, max_concurrent=2)
    for i in range(2):
        verdicts = asyncio.run(_score_all(judge, [f"loop {i} answer {j}" for j in range(4)]))
        assert all(v.ok for v in verdicts)
    assert len(model.calls) == 8 and model.peak == 2


async def _score_all(judge: RubricJudge, answers: list[str]) -> list[Any]:
    return list(await asyncio.gather(*(judge.score(a) for a in answers)))


async def test_levels_weighted_by_the_judges_probability_of_each_sampled_level() -> None:
    # Without top logprobs, each sampled answer that begins with its level carries the judge's
    # probability of that level: 0.6 for "5", 0.1 for "3" (the "5" was drawn twice).
    replies = [
        JudgeReply(text="5 - good", first_token_logprob=math.log(0.6)),
        JudgeReply(text="3 - ok", first_token_logprob=math.log(0.1)),
        JudgeReply(text="5 - good", first_token_logprob=math.log(0.6)),
    ]
    judge = RubricJudge(RUBRIC, model=_CountingModel(replies), mode="levels", n=3)
    verdict = await judge.score("x")
    assert verdict.probabilities == pytest.approx({"3": 0.1 / 0.7, "5": 0.6 / 0.7})
    expected_level = (5 * 0.6 + 3 * 0.1) / 0.7
    assert verdict.score == pytest.approx((expected_level - 1) / 4)
    # An answer that does not begin with its level carries no such probability: left out.
    replies[1] = JudgeReply(text="I give it 3", first_token_logprob=math.log(0.1))
    partial = RubricJudge(RUBRIC, model=_CountingModel(replies), mode="levels", n=3)
    assert (await partial.score("x")).probabilities == {"5": 1.0}
    # None qualifies (no logprobs): back to counting the sampled levels.
    plain = [JudgeReply(text=r.text) for r in replies]
    counted = RubricJudge(RUBRIC, model=_CountingModel(plain), mode="levels", n=3)
    assert (await counted.score("x")).probabilities == pytest.approx({"3": 1 / 3, "5": 2 / 3})


async def test_our_gateway_gives_the_first_tokens_logprob() -> None:
    async with scripted_judge(["4 - fine", "5 - perfect", "3 - skips a step", "5 - perfect"]) as sj:
        reply = await sj.model.chat([{"role": "user", "content": "Score:"}], top_logprobs=20)
        assert reply.text == "4 - fine" and reply.top_logprobs is None
        assert reply.first_token_logprob is not None and reply.first_token_logprob < 0
        judge = RubricJudge(RUBRIC, model=sj.model, mode="levels", n=3)
        verdict = await judge.score("x")
        probs = verdict.probabilities or {}
        assert set(probs) == {"3", "5"} and sum(probs.values()) == pytest.approx(1.0)
        assert probs["5"] != pytest.approx(2 / 3)  # weighted by probability, not counted
