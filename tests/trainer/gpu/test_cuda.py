"""The trainer on a CUDA GPU: engine, logprob parity in bf16, GRPO with LoRA, checkpoint + resume.

Marker ``gpu``: CI (no GPU) never selects them, and on a machine without CUDA they skip. They
run in ``python -m tests.benchmarks gpu`` (the prepared GPU check) or ``pytest -m gpu``.
The model is the tiny random Qwen2 the CPU tests use, in bf16 on the GPU: the point is the CUDA
paths (device placement, bf16 kernels, the batched KV cache on the GPU), not model size.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

DEVICE = os.environ.get("OSMOSIS_GPU_TEST_DEVICE", "cuda")
"""``cpu`` dry-runs these tests' logic on a machine without a GPU (not their purpose)."""

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        DEVICE.startswith("cuda") and not torch.cuda.is_available(), reason="needs a CUDA GPU"
    ),
]


@pytest.fixture(scope="module")
def cuda_loaded(tiny_model_dir: Path) -> Any:
    from osmosis_trainer.models import load_model

    return load_model(str(tiny_model_dir), device=DEVICE, dtype="bfloat16")


def _requests(n: int) -> list[Any]:
    from osmosis_ai.serving import GenerationRequest

    return [
        GenerationRequest(
            messages=[{"role": "user", "content": "What is 2 + 3?" * (i + 1)}],
            temperature=1.0,
            max_tokens=12,
            seed=i,
        )
        for i in range(n)
    ]


async def _sample(loaded: Any, n: int) -> list[Any]:
    from osmosis_trainer.engines import HFEngine

    engine = HFEngine(loaded, device=DEVICE, max_batch_size=8, seed=0)
    try:
        return list(await asyncio.gather(*(engine.generate(r) for r in _requests(n))))
    finally:
        await engine.close()


def test_hf_engine_samples_on_the_gpu(cuda_loaded: Any) -> None:
    results = asyncio.run(_sample(cuda_loaded, 6))
    tok, eos = cuda_loaded.tokenizer, cuda_loaded.tokenizer.eos_token_id
    assert next(cuda_loaded.model.parameters()).device.type == DEVICE.split(":")[0]
    for res in results:
        ids = res.completion_token_ids
        assert ids and res.logprobs is not None and len(res.logprobs) == len(ids)
        assert all(lp <= 0.0 for lp in res.logprobs)
        text_ids = ids[:-1] if res.finish_reason != "length" and ids[-1] == eos else ids
        assert tok.decode(text_ids, skip_special_tokens=False) == res.text
        assert len(ids) <= 12


def test_engine_and_trainer_logprobs_agree_in_bf16(cuda_loaded: Any) -> None:
    """The sampler's logprobs (batched, KV cache, left padding) against the trainer's forward
    of the same ids: in bf16 they agree to bf16 rounding, so the importance ratio stays ~1."""
    from osmosis_trainer.loop._policy import token_logprobs

    results = asyncio.run(_sample(cuda_loaded, 8))
    diffs = []
    for res in results:
        prompt, completion = res.prompt_token_ids, res.completion_token_ids
        ids = torch.tensor([prompt + completion], device=DEVICE)
        mask = torch.tensor(
            [[0] * (len(prompt) - 1) + [1] * len(completion)], dtype=torch.bool, device=DEVICE
        )
        with torch.no_grad():
            logp, _ = token_logprobs(cuda_loaded.model, ids, mask, temperature=1.0)
        diffs.append((logp[mask].float().cpu() - torch.tensor(res.logprobs)).abs())
    every = torch.cat(diffs)
    assert every.numel() >= 40
    # bf16 has 8 bits of mantissa: logits of a few units carry ~0.02 of rounding each.
    assert float(every.mean()) < 0.03, every
    assert float(every.max()) < 0.25, every
    ratio = torch.exp(every).mean()
    assert abs(float(ratio) - 1.0) < 0.05


def _workspace(tiny_model_dir: Path, root: Path, steps: int) -> Path:
    from osmosis_trainer.models import load_model
    from tests.e2e.toy_workspace import make_workspace

    eos = int(load_model(str(tiny_model_dir)).tokenizer.eos_token_id)
    return make_workspace(
        root,
        tiny_model_dir,
        eos_id=eos,
        max_steps=steps,
        total_epochs=2,  # 8 rows / 4 per step: 2 steps an epoch
        device=DEVICE,
        extra_toml="\n[checkpoints]\ncheckpoint_save_freq = 1\n",
    )


async def test_grpo_steps_with_lora_checkpoint_and_resume(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    from peft import PeftModel

    from osmosis_ai.config import load_training_config
    from osmosis_trainer.checkpoints import list_checkpoints
    from osmosis_trainer.job import run_training
    from osmosis_trainer.loop import StepReport
    from osmosis_trainer.loop._metrics import read_metrics
    from osmosis_trainer.loop._run import create_run_dir
    from osmosis_trainer.models import load_model

    config_file = _workspace(tiny_model_dir, tmp_path / "ws", steps=3)
    config = load_training_config(config_file)
    run = create_run_dir(tmp_path / "runs", "even", config_file=config_file)

    def stop_after_two(report: StepReport) -> None:
        if report.kind == "train" and report.step == 2:
            run.stop_file.touch()

    stopped = await run_training(config, run, on_report=stop_after_two)
    assert stopped.status == "stopped" and stopped.steps_done == 2
    run.stop_file.unlink()
    resumed = await run_training(config, run, resume=True)
    assert resumed.status == "finished" and resumed.steps_done == 3

    train = [r for r in read_metrics(run.path / "metrics.jsonl") if r["kind"] == "train"]
    assert [r["step"] for r in train] == [1, 2, 3]
    for record in train:
        assert record["failed_rollouts"] == 0 and record["samples"] == 16
        assert record["loss"] == record["loss"]  # not NaN
        assert record["grad_norm"] == record["grad_norm"]
        # The GPU sampler and the GPU trainer agree (bf16 on both sides).
        assert abs(record["is_ratio_mean"] - 1.0) < 0.05
    assert [p.name for p in list_checkpoints(run.checkpoints)][-1] == "step_000003"

    base = load_model(str(tiny_model_dir), device=DEVICE, dtype="bfloat16").model
    peft_model = PeftModel.from_pretrained(base, str(run.checkpoints / "step_000003" / "adapter"))
    lora_b = [p for n, p in peft_model.named_parameters() if "lora_B" in n]
    assert lora_b and any(float(p.abs().max()) > 0 for p in lora_b)
