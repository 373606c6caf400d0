"""The HF engine's CPU attention: the model's eager function for one-token steps, SDPA else."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from osmosis_ai.serving import GenerationRequest  # noqa: E402
from osmosis_trainer._kv import cache_kwargs  # noqa: E402
from osmosis_trainer.engines import HFEngine  # noqa: E402
from osmosis_trainer.engines._attention import (  # noqa: E402
    DECODE_ATTENTION,
    use_decode_attention,
)
from tests.trainer.engines._gate import EngineGate  # noqa: E402


def _spy(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, seen: list[int]) -> None:
    real = getattr(owner, name)

    def recording(module: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(int(query.shape[2]))
        return real(module, query, *args, **kwargs)

    monkeypatch.setattr(owner, name, recording)


async def test_decoding_steps_run_eager_and_prefill_runs_sdpa(
    tiny_loaded: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import transformers.integrations.sdpa_attention as sdpa_module

    modeling = sys.modules[type(tiny_loaded.model).__module__]
    eager_q: list[int] = []
    sdpa_q: list[int] = []
    _spy(monkeypatch, modeling, "eager_attention_forward", eager_q)
    _spy(monkeypatch, sdpa_module, "sdpa_attention_forward", sdpa_q)
    engine = HFEngine(tiny_loaded, device="cpu", max_batch_size=4, seed=0)
    try:
        reqs = [
            GenerationRequest(
                messages=[{"role": "user", "content": "hi " * (i + 1)}], max_tokens=5, seed=i
            )
            for i in range(3)
        ]
        EngineGate(engine).hold_until_queued(len(reqs))
        await asyncio.gather(*(engine.generate(r) for r in reqs))
    finally:
        await engine.close()
    layers = tiny_loaded.model.config.num_hidden_layers
    assert eager_q and set(eager_q) == {1} and len(eager_q) % layers == 0
    assert sdpa_q and min(sdpa_q) > 1
    # The engine switched its own copy: the caller's model still runs SDPA.
    assert tiny_loaded.model.config._attn_implementation == "sdpa"


def test_only_an_sdpa_model_is_switched(tiny_loaded: Any) -> None:
    import copy

    model = copy.deepcopy(tiny_loaded.model)
    assert use_decode_attention(model)
    assert model.config._attn_implementation == DECODE_ATTENTION
    assert not use_decode_attention(model)  # already switched
    model.set_attn_implementation("eager")  # a user's own choice stays
    assert not use_decode_attention(model)
    assert model.config._attn_implementation == "eager"


def test_switched_logits_equal_sdpa_on_a_padded_batch(tiny_loaded: Any) -> None:
    """Prefill (left-padded, SDPA over eager's additive mask) and one decoding step (eager)
    give the logits transformers' own SDPA gives."""
    import copy

    from transformers import DynamicCache

    plain = tiny_loaded.model.eval()
    switched = copy.deepcopy(plain)
    assert use_decode_attention(switched)
    ids = torch.tensor([[0, 0, 5, 6, 7], [8, 9, 10, 11, 12]])
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    step = torch.tensor([[13], [14]])
    outs = []
    with torch.no_grad():
        for model in (plain, switched):
            cache = DynamicCache(config=model.config)
            first = model(input_ids=ids, attention_mask=mask, **cache_kwargs(model, cache)).logits
            nxt = model(
                input_ids=step,
                attention_mask=torch.cat([mask, torch.ones(2, 1, dtype=torch.long)], 1),
                position_ids=torch.tensor([[3], [5]]),
                **cache_kwargs(model, cache),
            ).logits
            outs.append((first[:, -1], nxt[:, -1]))
    for want, got in zip(outs[0], outs[1], strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-4)
