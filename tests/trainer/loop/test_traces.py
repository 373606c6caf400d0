"""The trainer keeps a bounded sample of each step's trajectories for the dashboard."""

from __future__ import annotations

import json
import math
from pathlib import Path

from osmosis_ai.config import AlgorithmConfig, CheckpointsConfig, SamplingConfig, TrainingSection
from osmosis_trainer.loop import Trainer, resolve_settings
from osmosis_trainer.loop._policy import attach_lora
from osmosis_trainer.loop._run import create_run_dir
from osmosis_trainer.loop._traces import TraceSampler, token_texts
from osmosis_trainer.models import load_model
from tests.trainer.loop.toy import ToySource, even_token_reward, toy_rows


async def test_each_step_keeps_whole_groups_with_tokens_and_both_logprobs(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    lm = load_model(str(tiny_model_dir))
    model = attach_lora(lm.model, r=4, alpha=8, dropout=0.0, target_modules="all-linear", seed=0)
    eos = int(lm.tokenizer.eos_token_id)
    source = ToySource(model, eos_id=eos, reward=even_token_reward(eos, min_len=2), n_samples=4)
    rows = toy_rows(lm.tokenizer, 5)
    settings = resolve_settings(
        n_rows=len(rows), pad_id=int(lm.tokenizer.pad_token_id),
        training=TrainingSection(rollout_batch_size=3, lr=2e-2, seed=0, total_epochs=2,
                                 max_steps=2),
        algorithm=AlgorithmConfig(warmup_steps=1),
        sampling=SamplingConfig(max_tokens=8),
        checkpoints=CheckpointsConfig(checkpoint_save_freq=2),
    )
    run = create_run_dir(tmp_path, "toy")
    sampler = TraceSampler(run.path, 6, decode=token_texts(lm.tokenizer))
    trainer = Trainer(model, source, rows, settings, run, tensorboard=False, traces=sampler)
    await trainer.train()

    files = sorted(p.name for p in (run.path / "traces").iterdir())
    assert files == ["step_000001.jsonl", "step_000002.jsonl"]
    records = [json.loads(line) for line in
               (run.path / "traces" / "step_000001.jsonl").read_text().splitlines()]
    # Budget 6 with groups of 4: the first group whole, then 2 of the next.
    groups = [r["group_id"] for r in records]
    assert len(records) == 6 and groups[:4] == [groups[0]] * 4 and groups[4] != groups[0]
    scored = 0
    for r in records:
        assert r["step"] == 1 and isinstance(r["reward"], float)
        seq = r["sequences"][0]
        assert len(seq["tokens"]) == len(seq["token_ids"]) == len(seq["mask"])
        prompt = seq["mask"].index(1)  # ASCII prompt: its token texts join to its text
        assert "".join(seq["tokens"][:prompt]) == lm.tokenizer.decode(seq["token_ids"][:prompt])
        if r["advantage"] is None:  # its group did not train: no update logprobs
            assert seq["trainer_logprobs"] is None
            continue
        scored += 1
        for j, trained in enumerate(seq["mask"]):
            trainer_lp, sampler_lp = seq["trainer_logprobs"][j], seq["sampler_logprobs"][j]
            if trained and j > 0:
                # Step 1 is on-policy: the update's first forward gives the sampler's logprob.
                assert math.isclose(trainer_lp, sampler_lp, abs_tol=1e-3), (j, seq)
            else:
                assert trainer_lp is None
    assert scored > 0
    # The first group's advantages are its rewards centred (GRPO), as trained.
    first = [r for r in records if r["group_id"] == groups[0]]
    rewards = [r["reward"] for r in first]
    if len(set(rewards)) > 1:
        mean = sum(rewards) / len(rewards)
        assert all((r["advantage"] > 0) == (r["reward"] > mean) for r in first)


def test_zero_budget_picks_nothing(tmp_path: Path) -> None:
    from osmosis_trainer.loop._rollouts import GradedSample, StepRollouts

    ro = StepRollouts(samples=[GradedSample(0, "r", "main", 1.0, [])])
    assert TraceSampler(tmp_path, 0).pick(ro) == []
    assert len(TraceSampler(tmp_path, 5).pick(ro)) == 1

