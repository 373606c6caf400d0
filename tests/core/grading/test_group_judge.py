"""GroupJudge against a scripted judge behind the real gateway: one call per group, shuffled and
rotated orders mapped back to the right responses, the GRPO group gathered across rollouts."""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter

import pytest

from osmosis_ai.grading import GroupJudge, GroupJudgeGrader, JudgeError
from osmosis_ai.grading._group import rotations
from osmosis_ai.serving import GenerationRequest
from tests.core.grading._helpers import (
    grader_ctx,
    prefer_shorter,
    scripted_judge,
    shown_responses,
)

RUBRIC = "Prefer the reply that solves the problem in the fewest words."
ANSWERS = ["Press reset.", "Open settings, then press reset.", "Well... " * 8 + "press reset."]


async def test_one_call_scores_the_group_relative_to_each_other() -> None:
    async with scripted_judge(prefer_shorter) as sj:
        judge = GroupJudge(RUBRIC, model=sj.model)
        verdicts = await judge.score_group(ANSWERS, question="How do I reset?")
        assert len(sj.requests) == 1
        assert sorted(shown_responses(sj.requests[0])) == sorted(a.strip() for a in ANSWERS)
        assert [v.score for v in verdicts] == [1.0, 0.5, 0.0]
        assert verdicts[0].reasons == f"{len(ANSWERS[0])} chars"
        # The call's cost is booked once, so per-sample sums equal the judge's totals.
        assert sum(v.usage.calls for v in verdicts) == 1 == judge.usage.calls


async def test_repeated_calls_rotate_positions_and_average() -> None:
    def position_biased(req: GenerationRequest) -> str:
        # A judge that likes whatever comes first: 1.0 to position 1, 0.0 to the others.
        k = len(shown_responses(req))
        return json.dumps(
            {"scores": [{"id": i, "score": float(i == 1), "reasons": ""} for i in range(1, k + 1)]}
        )

    async with scripted_judge(position_biased) as sj:
        judge = GroupJudge(RUBRIC, model=sj.model, n=3)
        verdicts = await judge.score_group(ANSWERS)
        orders = [shown_responses(r) for r in sj.requests]
        assert len(orders) == 3 and len({tuple(o) for o in orders}) == 3
        # Every response was shown once in every position...
        for answer in ANSWERS:
            assert sorted(o.index(answer.strip()) for o in orders) == [0, 1, 2]
        # ...so the position bias cancels out: everyone gets the same mean score.
        assert [v.score for v in verdicts] == pytest.approx([1 / 3] * 3)
        assert all(sorted(v.positions or []) == [1, 2, 3] for v in verdicts)
        assert {r.temperature for r in sj.requests} == {1.0}


def test_rotations_spread_positions() -> None:
    orders = rotations(4, 4, random.Random(0))
    assert all(sorted(o) == [0, 1, 2, 3] for o in orders)
    for item in range(4):
        assert sorted(o.index(item) for o in orders) == [0, 1, 2, 3]
    two = rotations(4, 2, random.Random(0))
    assert Counter(two[0].index(i) - two[1].index(i) for i in range(4)).keys() <= {2, -2}


async def test_the_order_is_shuffled_but_reproducible() -> None:
    seen = []
    for _ in range(2):
        async with scripted_judge(prefer_shorter) as sj:
            await GroupJudge(RUBRIC, model=sj.model).score_group([f"reply {i}" for i in range(8)])
            seen.append(shown_responses(sj.requests[0]))
    assert seen[0] == seen[1] and seen[0] != [f"reply {i}" for i in range(8)]


async def test_group_cache_hit_in_any_order() -> None:
    async with scripted_judge(prefer_shorter) as sj:
        judge = GroupJudge(RUBRIC, model=sj.model)
        first = await judge.score_group(ANSWERS)
        again = await judge.score_group(list(reversed(ANSWERS)))
        assert len(sj.requests) == 1
        assert [v.score for v in again] == [v.score for v in reversed(first)]
        assert all(v.cached for v in again) and judge.usage.cache_hits == 3


async def test_a_reply_missing_an_id_is_retried_then_fails_every_sample() -> None:
    bad = json.dumps({"scores": [{"id": 1, "score": 1.0, "reasons": ""}]})
    async with scripted_judge([bad, bad, bad]) as sj:
        judge = GroupJudge(RUBRIC, model=sj.model)
        verdicts = await judge.score_group(ANSWERS)
        assert len(sj.requests) == 3
        assert "responses [2, 3] have no score" in str(sj.requests[1].messages[-1]["content"])
        assert all(not v.ok and v.score is None for v in verdicts)
        assert judge.usage.failures == 3 and verdicts[0].raw == [bad, bad, bad]


async def test_id_score_lines_are_accepted() -> None:
    async with scripted_judge(["1: 0.2 - long\n2: 0.9 - short\n3: 0.5 - ok"]) as sj:
        verdicts = await GroupJudge(RUBRIC, model=sj.model).score_group(["a", "b", "c"])
        assert sorted(v.score or 0.0 for v in verdicts) == [0.2, 0.5, 0.9]


async def test_grade_gathers_the_rows_rollouts_into_one_call() -> None:
    async with scripted_judge(prefer_shorter) as sj:
        judge = GroupJudge(RUBRIC, model=sj.model)
        # Three rollouts of row 7 (a GRPO group of 3), graded separately as the runner does,
        # and one rollout of another row.
        ctxs = [
            grader_ctx({"main": answer}, row_index=7, n_samples=3, sample_index=i)
            for i, answer in enumerate(ANSWERS)
        ]
        other = grader_ctx({"main": "x"}, question="Other row", row_index=8, n_samples=3)
        pending_other = asyncio.ensure_future(judge.grade(other))
        await asyncio.gather(*(judge.grade(c) for c in ctxs))
        assert len(sj.requests) == 1
        assert [c.samples["main"].reward for c in ctxs] == [1.0, 0.5, 0.0]
        assert not pending_other.done()  # row 8 still waits for its group
        pending_other.cancel()


async def test_grade_with_the_rollouts_own_samples_as_the_group() -> None:
    async with scripted_judge(prefer_shorter) as sj:
        ctx = grader_ctx({"short": "Yes.", "long": "Yes, certainly, you can do that."})
        await GroupJudge(RUBRIC, model=sj.model).grade(ctx)
        assert ctx.samples["short"].reward == 1.0 and ctx.samples["long"].reward == 0.0


async def test_a_failed_group_fails_every_rollout_in_it() -> None:
    async with scripted_judge(["no idea"] * 3) as sj:
        judge = GroupJudge(RUBRIC, model=sj.model)
        ctxs = [grader_ctx({"main": a}, row_index=0, n_samples=3) for a in ANSWERS]
        results = await asyncio.gather(*(judge.grade(c) for c in ctxs), return_exceptions=True)
        assert all(isinstance(r, JudgeError) and "no idea" in str(r) for r in results)
        assert all(c.samples["main"].reward is None for c in ctxs)


async def test_ready_grader_subclass(monkeypatch: pytest.MonkeyPatch) -> None:
    async with scripted_judge(prefer_shorter) as sj:
        monkeypatch.setenv("OSMOSIS_JUDGE_MODEL", sj.model.model)

        class Brief(GroupJudgeGrader):
            rubric = RUBRIC

        ctxs = [grader_ctx({"main": a}, row_index=0, n_samples=3) for a in ANSWERS]
        await asyncio.gather(*(Brief().grade(c) for c in ctxs))
        assert [c.samples["main"].reward for c in ctxs] == [1.0, 0.5, 0.0]
        assert Brief.judge().model.model == sj.model.model


async def test_few_shot_group_example_uses_the_scale() -> None:
    async with scripted_judge(prefer_shorter) as sj:
        judge = GroupJudge(RUBRIC, model=sj.model, few_shot=True, scale=(0.0, 10.0))
        verdicts = await judge.score_group(ANSWERS)
        (req,) = sj.requests
        assert [m["role"] for m in req.messages] == ["system", "user", "assistant", "user"]
        example = json.loads(str(req.messages[2]["content"]))
        assert [s["score"] for s in example["scores"]] == [0.0, 10.0]
        assert sorted(shown_responses(req)) == sorted(a.strip() for a in ANSWERS)
        assert [v.score for v in verdicts] == [1.0, 0.5, 0.0]
    assert GroupJudge(RUBRIC, model="embedded").few_shot
    assert not GroupJudge(RUBRIC, model="http://judge.invalid/v1").few_shot


async def test_a_group_whose_other_rollouts_never_arrive_is_judged_without_them() -> None:
    # Rollouts 1 and 2 of the row failed in their workflow: only rollout 0 reaches the grader.
    async with scripted_judge(prefer_shorter) as sj:
        judge = GroupJudge(RUBRIC, model=sj.model, group_wait_s=0)
        ctx = grader_ctx({"main": ANSWERS[0]}, row_index=3, n_samples=3)
        await judge.grade(ctx)
        (req,) = sj.requests
        assert shown_responses(req) == [ANSWERS[0]]
        assert ctx.samples["main"].reward == 1.0
        assert not judge._pending  # nothing left waiting
