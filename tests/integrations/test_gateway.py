"""Both adapters through the real policy gateway: token-level samples the trainer can use.

- ``ScriptedEngine`` behind the gateway forces correct tool calls, so whole calculator rollouts run
  (16 concurrent, two adapters) and must merge into training sequences with no cross-talk.
- ``HFEngine`` on a tiny random model: the model emits garbage, so only robustness is asserted:
  every rollout ends, and every recorded call is token-exact and trainable.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from osmosis_ai.config import SamplingConfig  # noqa: E402
from osmosis_ai.rollout.running import RolloutOutcome  # noqa: E402
from osmosis_ai.serving.gateway import PolicyGateway  # noqa: E402
from osmosis_ai.testing import ScriptedEngine  # noqa: E402
from osmosis_trainer.engines import HFEngine  # noqa: E402
from osmosis_trainer.trajectory import build_sequences  # noqa: E402
from tests.integrations._calc import calculator, question, rows  # noqa: E402
from tests.integrations._helpers import run_rollouts, tool_call_ids  # noqa: E402

ROLLOUTS = {
    "strands": ("strands_calc.py", "main"),
    "openai-agents": ("agents_calc.py", "calculator"),
}


def _assert_trainable(outcome: RolloutOutcome, sample_id: str) -> list[Any]:
    sample = outcome.sample(sample_id)
    assert sample is not None, [s.id for s in outcome.samples]
    assert sample.calls and all(c.trainable for c in sample.calls)
    assert {(c.rollout_id, c.sample_id) for c in sample.calls} == {(outcome.rollout_id, sample_id)}
    build = build_sequences(sample.calls)
    sampled = sum(seq.num_sampled for seq in build.sequences)
    assert sampled == sum(len(c.completion_token_ids or []) for c in sample.calls)
    for seq in build.sequences:
        assert len(seq.token_ids) == len(seq.loss_mask) == len(seq.sampler_logprobs)
        assert all(lp <= 0.0 for lp in seq.sampler_logprobs)
    return build.sequences


@pytest.mark.parametrize("framework", ["strands", "openai-agents"])
async def test_sixteen_concurrent_calculator_rollouts_through_the_gateway(framework: str) -> None:
    entrypoint, sample_id = ROLLOUTS[framework]
    engine = ScriptedEngine(per_sample=False, script=calculator)
    async with PolicyGateway(
        engine, sampling=SamplingConfig(max_tokens=256)
    ) as gw:
        outcomes, runner = await run_rollouts(entrypoint, gw, rows(8), n_samples=2, concurrency=16)
    assert len(outcomes) == 16 and runner.peak_in_flight > 8
    merged = 0
    for outcome in outcomes:
        q, answer = question(outcome.row_index)
        sample = outcome.sample(sample_id)
        assert sample is not None and sample.reward == 1.0, sample.messages if sample else outcome
        sequences = _assert_trainable(outcome, sample_id)
        merged += len(sequences) == 1
        assert len(sample.calls) == 2
        assert tool_call_ids(sample.messages) == [t.id for t in sample.calls[0].tool_calls]
        for call in sample.calls:
            users = [m for m in call.request_messages if m["role"] == "user"]
            assert json.dumps(users).count("What is") == 1 and q in json.dumps(users)
    # Both frameworks replay this history faithfully enough for turns to merge into one sequence.
    assert merged == 16


@pytest.mark.parametrize(
    ("framework", "mode"), [("strands", "stream"), ("openai-agents", "streamed")]
)
async def test_streaming_policy_calls_through_the_gateway(framework: str, mode: str) -> None:
    entrypoint, sample_id = ROLLOUTS[framework]
    engine = ScriptedEngine(per_sample=False, script=calculator)
    async with PolicyGateway(engine, sampling=SamplingConfig(max_tokens=256)) as gw:
        outcomes, _ = await run_rollouts(entrypoint, gw, rows(2, mode=mode), n_samples=2)
    for outcome in outcomes:
        sample = outcome.sample(sample_id)
        assert sample is not None and sample.reward == 1.0
        assert len(_assert_trainable(outcome, sample_id)) == 1  # streamed ids merge too


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from osmosis_trainer.models import build_tiny_model, load_model

    path: Path = build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", initializer_range=0.5)
    return load_model(str(path))


@pytest.mark.parametrize("framework", ["strands", "openai-agents"])
async def test_tiny_hf_model_rollouts_record_token_exact_trainable_calls(
    framework: str, tiny_model: Any
) -> None:
    entrypoint, sample_id = ROLLOUTS[framework]
    engine = HFEngine(tiny_model, device="cpu", seed=0, max_new_tokens=24)
    try:
        async with PolicyGateway(engine, sampling=SamplingConfig(max_tokens=24)) as gw:
            outcomes, _ = await run_rollouts(
                entrypoint, gw, rows(4, tolerant=True), n_samples=2, concurrency=8
            )
    finally:
        await engine.close()
    assert len(outcomes) == 8
    tok = tiny_model.tokenizer
    for outcome in outcomes:
        sample = outcome.sample(sample_id)
        assert sample is not None and sample.reward is not None  # graded, even if wrong
        _assert_trainable(outcome, sample_id)
        first = sample.calls[0]
        prompt = tok.decode(first.prompt_token_ids)
        assert question(outcome.row_index)[0] in prompt  # this rollout's own question
