"""LeanForward computes what transformers' forward computes: logits, cache, LoRA and gradients."""

from __future__ import annotations

import copy
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from osmosis_trainer.lean import HFForward, LeanForward, lean_forward, lean_unsupported  # noqa: E402
from osmosis_trainer.loop._policy import attach_lora, token_logprobs  # noqa: E402


def _llama(gqa: bool) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2 if gqa else 4, initializer_range=0.3,
        attention_bias=True, rope_scaling={"rope_type": "linear", "factor": 2.0},
    )
    return LlamaForCausalLM(config).eval()


@pytest.fixture(params=["qwen2", "llama-gqa"])
def model(request: pytest.FixtureRequest, tiny_loaded: Any) -> Any:
    return copy.deepcopy(tiny_loaded.model).eval() if request.param == "qwen2" else _llama(True)


def _decode(forward: Any, ids: Any, mask: Any, steps: int) -> Any:
    """Prefill left-padded ``ids`` then feed fixed tokens for ``steps``: all logits [steps+1, B, V]."""
    cache = forward.new_cache()
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    out = [forward(ids, mask, pos, cache)]
    nxt = pos[:, -1:] + 1
    for i in range(steps):
        mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], 1)
        out.append(forward(ids[:, i : i + 1], mask, nxt, cache))
        nxt = nxt + 1
    return torch.stack(out)


def test_decoding_logits_match_transformers_with_left_padding(model: Any) -> None:
    assert lean_unsupported(model) is None
    torch.manual_seed(0)
    ids = torch.randint(0, 90, (3, 9))
    mask = torch.ones(3, 9, dtype=torch.long)
    mask[0, :4] = 0
    mask[2, :1] = 0
    with torch.inference_mode():
        ref = _decode(HFForward(model), ids, mask, 5)
        lean = _decode(LeanForward(model), ids, mask, 5)
    assert torch.isfinite(lean).all()
    assert torch.allclose(lean, ref, rtol=1e-5, atol=1e-4), (lean - ref).abs().max()


def test_training_logprobs_and_lora_gradients_match_transformers(tiny_loaded: Any) -> None:
    peft_model = attach_lora(
        copy.deepcopy(tiny_loaded.model), r=4, alpha=8, dropout=0.0,
        target_modules=["all-linear"], seed=0,
    )
    for _, p in peft_model.named_parameters():
        if p.requires_grad:  # B starts at zero: make the adapter matter
            torch.nn.init.normal_(p, std=0.2)
    torch.manual_seed(0)
    ids = torch.randint(0, 300, (4, 12))
    mask = torch.rand(4, 11) > 0.3
    results = []
    for lean in (False, True):
        peft_model.zero_grad()
        logp, _ = token_logprobs(peft_model, ids, mask, temperature=0.7, lean=lean)
        logp.sum().backward()
        grads = [p.grad.clone() for _, p in peft_model.named_parameters() if p.requires_grad]
        results.append((logp.detach(), grads))
    (ref, ref_g), (got, got_g) = results
    assert torch.allclose(got, ref, rtol=1e-5, atol=1e-4)
    for a, b in zip(got_g, ref_g, strict=True):  # float rounding only: 1e-6 relative here
        assert (a - b).norm() <= 1e-4 * b.norm()


def test_adapter_disabled_and_unsupported_layers() -> None:
    from peft import LoraConfig, get_peft_model

    model = _llama(False)
    dora = get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj"], use_dora=True))
    assert "variant" in str(lean_unsupported(dora.get_base_model()))
    assert lean_forward(dora.get_base_model()) is None
    plain = get_peft_model(_llama(False), LoraConfig(r=2, target_modules=["q_proj", "v_proj"]))
    assert lean_unsupported(plain.get_base_model()) is None
    ids = torch.randint(0, 90, (2, 6))
    mask = torch.ones(2, 5, dtype=torch.bool)
    for _, p in plain.named_parameters():
        if p.requires_grad:
            torch.nn.init.normal_(p, std=0.5)
    with torch.no_grad(), plain.disable_adapter():
        off = token_logprobs(plain, ids, mask, lean=True)[0]
        base = token_logprobs(plain, ids, mask, lean=False)[0]
    on = token_logprobs(plain, ids, mask, lean=True)[0].detach()
    assert torch.allclose(off, base, atol=1e-5)
    assert not torch.allclose(on, off, atol=1e-3)


def test_other_architectures_fall_back() -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=50))
    assert "gpt2" in str(lean_unsupported(gpt2))
    assert lean_forward(gpt2) is None


def test_fusion_needs_frozen_bases_one_scaling_and_no_dropout() -> None:
    from peft import LoraConfig, get_peft_model

    from osmosis_trainer.lean import _fusable_lora

    plain = _llama(False)
    attn = plain.model.layers[0].self_attn
    assert _fusable_lora((attn.q_proj, attn.k_proj)) is None  # trainable base weights
    for p in plain.parameters():
        p.requires_grad_(False)
    assert _fusable_lora((attn.q_proj, attn.k_proj)) == []
    lora = get_peft_model(plain, LoraConfig(r=2, target_modules=["q_proj", "k_proj"]))
    attn = lora.get_base_model().model.layers[0].self_attn
    assert _fusable_lora((attn.q_proj, attn.k_proj)) == ["default", "default"]
    dropped = get_peft_model(
        _llama(False), LoraConfig(r=2, lora_dropout=0.1, target_modules=["q_proj", "k_proj"])
    )
    attn = dropped.get_base_model().model.layers[0].self_attn
    assert _fusable_lora((attn.q_proj, attn.k_proj)) is None


def test_kv_layer_grows_in_place_and_matches_concatenation() -> None:
    from osmosis_trainer.lean import LeanLayer

    torch.manual_seed(0)
    layer, ref_k, ref_v = LeanLayer(), None, None
    for t in (5, 1, 1, 3, *([1] * 40)):  # a prefill, then decoding steps past two regrowths
        k, v = torch.randn(2, 3, t, 4), torch.randn(2, 3, t, 4)
        ref_k = k if ref_k is None else torch.cat([ref_k, k], dim=2)
        ref_v = v if ref_v is None else torch.cat([ref_v, v], dim=2)
        got_k, got_v = layer.extend(k, v)
        assert torch.equal(got_k, ref_k) and torch.equal(got_v, ref_v)
    before = layer.keys.data_ptr()
    layer.extend(torch.randn(2, 3, 1, 4), torch.randn(2, 3, 1, 4))
    assert layer.keys.data_ptr() == before  # written into spare room, not copied
    # Batch surgery sets keys and values one after the other (as for DynamicLayer).
    layer.keys = layer.keys[..., 10:, :]
    layer.values = layer.values[..., 10:, :]
    assert layer.keys.shape[-2] == layer.values.shape[-2] == ref_k.shape[-2] + 1 - 10
    kept_k = layer.keys.clone()
    layer.select_rows(torch.tensor([1]))
    k, _ = layer.extend(torch.ones(1, 3, 1, 4), torch.ones(1, 3, 1, 4))
    assert torch.equal(k[:, :, :-1], kept_k[1:]) and torch.equal(k[:, :, -1], torch.ones(1, 3, 4))


def test_kv_layer_concatenates_under_autograd() -> None:
    from osmosis_trainer.lean import LeanLayer

    layer = LeanLayer()
    a = torch.randn(1, 1, 3, 2, requires_grad=True)
    layer.extend(a, a * 2)
    b = torch.randn(1, 1, 1, 2, requires_grad=True)
    k, v = layer.extend(b, b * 2)
    (k.sum() + v.sum()).backward()
    assert torch.equal(a.grad, torch.full_like(a, 3.0)) and torch.equal(b.grad, torch.full_like(b, 3.0))
