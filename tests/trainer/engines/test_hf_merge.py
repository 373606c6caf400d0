"""Serving LoRA adapters merged into the base weights, and the cases left to peft."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from osmosis_ai.serving import GenerationRequest  # noqa: E402
from osmosis_trainer.engines import HFEngine  # noqa: E402
from osmosis_trainer.engines._hf_adapter import read_adapter  # noqa: E402
from osmosis_trainer.engines._hf_merge import (  # noqa: E402
    MergedLoRA,
    lora_deltas,
    unmergeable_reason,
)


def _adapter(model_dir: Path, out: Path, seed: int, **lora: Any) -> Path:
    from peft import LoraConfig, get_peft_model

    from osmosis_trainer.models import load_model

    torch.manual_seed(seed)
    settings = {"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj", "down_proj"]}
    peft_model = get_peft_model(
        load_model(str(model_dir)).model,
        LoraConfig(**{**settings, **lora}, init_lora_weights=False),
    )
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_" in name:
                p.normal_(0.0, 0.3)
    peft_model.save_pretrained(out)
    return out


def _peft_logits(model_dir: Path, adapter: Path, ids: Any) -> Any:
    from peft import PeftModel

    from osmosis_trainer.models import load_model

    ref = PeftModel.from_pretrained(load_model(str(model_dir)).model, str(adapter)).eval()
    with torch.no_grad():
        return ref(input_ids=ids).logits


def test_merged_weights_compute_what_peft_computes(
    tiny_loaded: Any, tiny_model_dir: Path, tmp_path: Path
) -> None:
    model = copy.deepcopy(tiny_loaded.model).eval()
    ids = torch.tensor([[1, 5, 9, 13, 2, 7]])
    with torch.no_grad():
        base_logits = model(input_ids=ids).logits
    merged = MergedLoRA()
    for seed, lora in ((1, {}), (2, {"use_rslora": True}), (3, {"target_modules": ["o_proj"]})):
        folder = _adapter(tiny_model_dir, tmp_path / f"a{seed}", seed, **lora)
        state = read_adapter(str(folder))
        assert unmergeable_reason(model, state) is None
        merged.apply(model, state)
        with torch.no_grad():
            got = model(input_ids=ids).logits
        assert torch.allclose(got, _peft_logits(tiny_model_dir, folder, ids), atol=1e-4)
    # The last adapter touched o_proj only: the earlier layers are back to their exact originals.
    originals = dict(tiny_loaded.model.named_parameters())
    for name, param in model.named_parameters():
        if "o_proj" not in name:
            assert torch.equal(param, originals[name]), name
    merged.restore(model)
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, base_logits)


def test_what_is_not_merged(tiny_loaded: Any, tiny_model_dir: Path, tmp_path: Path) -> None:
    model = tiny_loaded.model
    dora = read_adapter(str(_adapter(tiny_model_dir, tmp_path / "dora", 1, use_dora=True)))
    assert unmergeable_reason(model, dora) == "use_dora"
    plain = read_adapter(str(_adapter(tiny_model_dir, tmp_path / "plain", 2)))
    assert unmergeable_reason(copy.deepcopy(model).to(torch.bfloat16), plain) == (
        "the model is not fp32"
    )
    bad = copy.copy(plain)
    bad.weights = {k: v for k, v in plain.weights.items() if "q_proj.lora_B" not in k}
    with pytest.raises(ValueError, match="lacks lora_B"):
        lora_deltas(model, bad)
    wrong = copy.copy(plain)
    wrong.weights = {k: v[:, :3] if "lora_A" in k else v for k, v in plain.weights.items()}
    with pytest.raises(ValueError, match="shapes"):
        lora_deltas(model, wrong)


async def test_engine_switches_between_merged_and_peft_serving(
    tiny_loaded: Any, tiny_model_dir: Path, tmp_path: Path
) -> None:
    engine = HFEngine(tiny_loaded, device="cpu", seed=0)
    req = GenerationRequest(
        messages=[{"role": "user", "content": "What is 2 + 3?"}], temperature=0.0, max_tokens=6
    )
    try:
        folders = [
            _adapter(tiny_model_dir, tmp_path / "m1", 1),  # merged
            _adapter(tiny_model_dir, tmp_path / "d2", 2, use_dora=True),  # peft layers
            _adapter(tiny_model_dir, tmp_path / "m3", 3),  # stays on peft (already wrapped)
        ]
        for version, folder in enumerate(folders, start=1):
            await engine.load_adapter(str(folder), version)
            res = await engine.generate(req)
            ids = torch.tensor([res.prompt_token_ids + res.completion_token_ids])
            logits = _peft_logits(tiny_model_dir, folder, ids)[0].float()
            start = len(res.prompt_token_ids) - 1
            steps = logits[start : start + len(res.completion_token_ids)].log_softmax(-1)
            fresh = steps.gather(1, torch.tensor(res.completion_token_ids)[:, None])[:, 0]
            assert torch.allclose(fresh, torch.tensor(res.logprobs), atol=1e-4), version
            assert res.policy_version == version
        # Moving to peft put the merged weights back first: the wrapped base is the original.
        from peft import PeftModel

        assert isinstance(engine.model, PeftModel)
        originals = dict(tiny_loaded.model.named_parameters())
        for name, param in engine.model.get_base_model().named_parameters():
            key = name.replace(".base_layer", "")
            if "lora_" not in name and key in originals:
                assert torch.equal(param, originals[key]), name
    finally:
        await engine.close()


def test_a_shared_model_is_never_merged_into(tiny_loaded: Any) -> None:
    assert HFEngine(tiny_loaded, device="cpu").merge_adapters
    assert not HFEngine(tiny_loaded, device="cpu", copy_model=False).merge_adapters


async def test_a_failed_peft_load_keeps_the_merged_adapter(
    tiny_loaded: Any, tiny_model_dir: Path, tmp_path: Path
) -> None:
    from safetensors.torch import save_file

    from osmosis_ai.serving import EngineError

    engine = HFEngine(tiny_loaded, device="cpu", seed=0)
    req = GenerationRequest(
        messages=[{"role": "user", "content": "What is 2 + 3?"}], temperature=0.0, max_tokens=6
    )
    try:
        await engine.load_adapter(str(_adapter(tiny_model_dir, tmp_path / "m1", 1)), 1)
        before = await engine.generate(req)
        bad = _adapter(tiny_model_dir, tmp_path / "dora", 2, use_dora=True)
        save_file(
            {"base_model.model.nonsense.lora_A.weight": torch.zeros(4, 4)},
            str(bad / "adapter_model.safetensors"),
        )
        with pytest.raises(EngineError, match="could not load adapter"):
            await engine.load_adapter(str(bad), 2)
        after = await engine.generate(req)
        assert engine.policy_version == 1 and after.policy_version == 1
        assert after.completion_token_ids == before.completion_token_ids
        assert after.logprobs == pytest.approx(before.logprobs, abs=1e-6)
    finally:
        await engine.close()


async def test_shared_weights_serve_merged_adapters_without_writing_them(
    tiny_loaded: Any, tiny_model_dir: Path, tmp_path: Path
) -> None:
    owner = dict(tiny_loaded.model.named_parameters())
    before = {name: p.detach().clone() for name, p in owner.items()}
    engine = HFEngine(tiny_loaded, device="cpu", seed=0, share_weights=True)
    req = GenerationRequest(
        messages=[{"role": "user", "content": "What is 2 + 3?"}], temperature=0.0, max_tokens=6
    )
    try:
        # The copy costs no weight memory: its parameters are the owner's tensors.
        assert all(p is owner[n] for n, p in engine.model.named_parameters())
        for version, seed in ((1, 1), (2, 2)):  # the second re-fills the merged buffers
            folder = _adapter(tiny_model_dir, tmp_path / f"m{seed}", seed)
            await engine.load_adapter(str(folder), version)
            res = await engine.generate(req)
            prompt, completion = res.prompt_token_ids or [], res.completion_token_ids or []
            ids = torch.tensor([prompt + completion])
            logits = _peft_logits(tiny_model_dir, folder, ids)[0].float()
            steps = logits[len(prompt) - 1 : len(prompt) - 1 + len(completion)].log_softmax(-1)
            fresh = steps.gather(1, torch.tensor(completion)[:, None])[:, 0]
            assert torch.allclose(fresh, torch.tensor(res.logprobs), atol=1e-4), version
        served = dict(engine.model.named_parameters())
        adapted = "model.layers.0.self_attn.q_proj.weight"
        assert served[adapted] is not owner[adapted]  # a merged buffer of the engine's own
        assert served["model.embed_tokens.weight"] is owner["model.embed_tokens.weight"]
        assert all(torch.equal(p, before[n]) for n, p in owner.items())
    finally:
        await engine.close()
