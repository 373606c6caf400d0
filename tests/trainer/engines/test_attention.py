"""CPU attention for the models osmosis owns: the model's eager function where the score
matrix is small, its SDPA else."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from osmosis_ai.serving import GenerationRequest  # noqa: E402
from osmosis_trainer._kv import cache_kwargs  # noqa: E402
from osmosis_trainer.engines import HFEngine, _attention  # noqa: E402
from osmosis_trainer.engines._attention import (  # noqa: E402
    EAGER_MAX_SCORES,
    SMALL_ATTENTION,
    eager_fits,
    use_small_attention,
)
from tests.trainer.engines._gate import EngineGate  # noqa: E402


def _spy(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, seen: list[int]) -> None:
    real = getattr(owner, name)

    def recording(module: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(int(query.shape[2]))
        return real(module, query, *args, **kwargs)

    monkeypatch.setattr(owner, name, recording)


def test_eager_only_for_many_queries_over_a_small_score_matrix() -> None:
    assert not eager_fits(32, 9, 1, 64)  # a decoding step, at any size: eager copies the cache
    assert not eager_fits(1, 1, 1, 1)
    assert eager_fits(2, 9, 256, 256)  # two packed training rows of SmolLM2-135M
    assert eager_fits(1, 1, 2, EAGER_MAX_SCORES // 2)
    assert not eager_fits(1, 1, 2, EAGER_MAX_SCORES // 2 + 1)
    assert not eager_fits(1, 9, 2048, 2048)  # a long prompt's prefill


@pytest.mark.parametrize("bound", [EAGER_MAX_SCORES, 0])
async def test_the_engine_decodes_on_sdpa_and_prefills_eager_below_the_bound(
    tiny_loaded: Any, monkeypatch: pytest.MonkeyPatch, bound: int
) -> None:
    import transformers.integrations.sdpa_attention as sdpa_module

    monkeypatch.setattr(_attention, "EAGER_MAX_SCORES", bound)
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
    assert 1 in sdpa_q and len(sdpa_q) % layers == 0  # decoding steps, at any bound
    if bound:  # short prompts: prefill is eager
        assert eager_q and min(eager_q) > 1 and len(eager_q) % layers == 0
        assert set(sdpa_q) == {1}
    else:  # above the bound every call is SDPA's
        assert not eager_q and max(sdpa_q) > 1
    # The engine switched its own copy: the caller's model still runs SDPA.
    assert tiny_loaded.model.config._attn_implementation == "sdpa"


async def test_decoding_steps_reach_sdpa_with_a_mask_when_no_row_is_padded(
    tiny_loaded: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine's decoding speed depends on this. transformers' SDPA function runs a
    one-query call of a grouped-query model on the key/value heads (the query heads packed
    as queries) only when it gets a mask; without one it asks torch's SDPA for
    ``enable_gqa``, whose CPU kernel took 1.6 ms against 0.25 ms per call at the engine's
    shapes (32 rows, SmolLM2-135M's 9/3 heads, torch 2.13). The switched model's mask
    function (eager's) always builds a mask, also for rows of equal length."""
    import transformers.integrations.sdpa_attention as sdpa_module

    real = sdpa_module.sdpa_attention_forward
    masks: list[bool] = []

    def recording(module: Any, query: Any, key: Any, value: Any, mask: Any, **kw: Any) -> Any:
        if query.shape[2] == 1:
            masks.append(mask is not None)
        return real(module, query, key, value, mask, **kw)

    monkeypatch.setattr(sdpa_module, "sdpa_attention_forward", recording)
    engine = HFEngine(tiny_loaded, device="cpu", max_batch_size=4, seed=0)
    try:
        reqs = [
            GenerationRequest(messages=[{"role": "user", "content": "hi"}], max_tokens=4, seed=i)
            for i in range(3)
        ]
        EngineGate(engine).hold_until_queued(len(reqs))
        await asyncio.gather(*(engine.generate(r) for r in reqs))
    finally:
        await engine.close()
    assert masks and all(masks)


def test_only_an_sdpa_model_is_switched(tiny_loaded: Any) -> None:
    import copy

    model = copy.deepcopy(tiny_loaded.model)
    assert use_small_attention(model)
    assert model.config._attn_implementation == SMALL_ATTENTION
    assert not use_small_attention(model)  # already switched
    model.set_attn_implementation("eager")  # a user's own choice stays
    assert not use_small_attention(model)
    assert model.config._attn_implementation == "eager"


@pytest.mark.parametrize("bound", [EAGER_MAX_SCORES, 0])
def test_switched_logits_equal_sdpa_on_a_padded_batch(
    tiny_loaded: Any, monkeypatch: pytest.MonkeyPatch, bound: int
) -> None:
    """Prefill (left-padded, over eager's additive mask) and one decoding step give the
    logits transformers' own SDPA gives, whichever function the size picks for prefill."""
    import copy

    from transformers import DynamicCache

    monkeypatch.setattr(_attention, "EAGER_MAX_SCORES", bound)
    plain = tiny_loaded.model.eval()
    switched = copy.deepcopy(plain)
    assert use_small_attention(switched)
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
