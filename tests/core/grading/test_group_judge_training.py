"""Training with a group-relative judge reward: a tiny model, trained through the real path
(runner -> policy gateway -> HF engine -> GroupJudgeGrader -> GRPO + LoRA), moves the way the
judge prefers. The judge (the real gateway in front of a scripted engine) ranks each group's
replies by length, shorter first, so the policy should learn to write shorter replies."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from osmosis_ai.config import load_training_config
from tests.core.grading._helpers import prefer_shorter, scripted_judge, shown_responses
from tests.torch_threads import _one_torch_thread  # noqa: F401  (autouse fixture)

pytestmark = pytest.mark.slow

ROLLOUT = """
from osmosis_ai.grading import GroupJudgeGrader
from osmosis_ai.rollout import AgentWorkflow


class Reply(AgentWorkflow):
    async def run(self, ctx):
        reply = await ctx.chat(ctx.prompt)
        return [*ctx.prompt, reply.message]


class Shorter(GroupJudgeGrader):
    rubric = "Prefer the shorter reply."
"""

STEPS = 20


async def test_group_judge_reward_moves_the_policy_the_judges_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from osmosis_trainer.job import run_training
    from osmosis_trainer.loop import StepReport
    from osmosis_trainer.loop._run import create_run_dir
    from osmosis_trainer.models import build_tiny_model, load_model
    from tests.e2e.toy_workspace import make_workspace

    model_dir = build_tiny_model(tmp_path / "tiny", initializer_range=0.5, seed=0)
    eos = int(load_model(str(model_dir)).tokenizer.eos_token_id)
    config_file = make_workspace(
        tmp_path / "ws",
        model_dir,
        eos_id=eos,
        max_steps=STEPS,
        rollout_batch_size=4,
        n_samples_per_prompt=4,
        total_epochs=50,
        max_response_length=12,
        extra_toml="\n[checkpoints]\ncheckpoint_save_freq = 100\n",
    )
    (tmp_path / "ws" / "rollouts" / "even" / "main.py").write_text(ROLLOUT)
    config = load_training_config(config_file)
    async with scripted_judge(prefer_shorter) as sj:
        monkeypatch.setenv("OSMOSIS_JUDGE_MODEL", sj.model.model)
        marks: list[int] = []
        judged: list[float] = []
        cached: list[float] = []

        def record(report: StepReport) -> None:
            if report.kind == "train":
                marks.append(len(sj.requests))
                judged.append(report.metrics.get("judge_calls", float("nan")))
                cached.append(report.metrics.get("judge_cache_hits", 0.0))

        run = create_run_dir(tmp_path / "runs", "short")
        result = await run_training(config, run, on_report=record)
        assert result.steps_done == STEPS, result
        # One judge call per GRPO group (4 rows of 4 samples per step), unless the judge's
        # cache already holds the group's four replies: a tiny policy that has converged
        # repeats whole groups, and a hit books one cache hit per reply instead of a call.
        assert [c + h / 4 for c, h in zip(judged, cached, strict=True)] == [4.0] * STEPS
        assert len(sj.requests) == sum(judged)
        assert all(len(shown_responses(r)) == 4 for r in sj.requests)
        lengths = []
        for start, end in zip([0, *marks[:-1]], marks, strict=True):
            shown = [len(t) for r in sj.requests[start:end] for t in shown_responses(r)]
            if shown:  # a step whose every group was a cache hit shows the judge nothing
                lengths.append(statistics.fmean(shown))
    first, last = statistics.fmean(lengths[:4]), statistics.fmean(lengths[-4:])
    assert last < 0.9 * first, f"replies did not get shorter: {lengths}"
    # The judge's calls show up in the training metrics (booked once per group).
    assert judged[0] == 4.0, judged
