"""Serving LoRA adapters merged into the base weights, and the cases left to peft."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from osmosis_ai.serving import EngineError, GenerationRequest  # noqa: E402
from osmosis_trainer.engines import HFEngine  # noqa: E402
from osmosis_trainer.engines._hf_adapter import read_adapter  # noqa: E402
from osmosis_trainer.engines._hf_merge import (  # noqa: E402
    MergedLoRA,
    lora_deltas,
    unmergeable_reason,
)
from tests.trainer.engines._adapters import peft_logits, peft_reference, save_adapter  # noqa: E402

_REQ = GenerationRequest(
    messages=[{"role": "user", "content": "What is 2 + 3?"}], temperature=0.0, max_tokens=6
)


def _broken_adapter(model_dir: Path, folder: Path, **config: Any) -> Path:
    """An adapter folder whose weights name a layer the model lacks: its load fails."""
    from safetensors.torch import save_file

    bad = save_adapter(model_dir, folder, 2, **config)
    save_file(
        {"base_model.model.nonsense.lora_A.weight": torch.zeros(4, 4)},
        str(bad / "adapter_model.safetensors"),
    )
    return bad


def _served_logprobs_match_peft(model_dir: Path, folder: Path, res: Any) -> bool:
    prompt, completion = res.prompt_token_ids or [], res.completion_token_ids or []
    logits = peft_logits(model_dir, folder, torch.tensor([prompt + completion]))[0].float()
    steps = logits[len(prompt) - 1 : len(prompt) - 1 + len(completion)].log_softmax(-1)
    fresh = steps.gather(1, torch.tensor(completion)[:, None])[:, 0]
    return bool(torch.allclose(fresh, torch.tensor(res.logprobs), atol=1e-4))


def test_merged_weights_compute_what_peft_computes(
    tiny_loaded: Any, tiny_model_dir: Path, tmp_path: Path
) -> None:
    model = copy.deepcopy(tiny_loaded.model).eval()
    ids = torch.tensor([[1, 5, 9, 13, 2, 7]])
    with torch.no_grad():
        base_logits = model(input_ids=ids).logits
    merged = MergedLoRA()
    for seed, lora in ((1, {}), (2, {"use_rslora": True}), (3, {"target_modules": ["o_proj"]})):
        folder = save_adapter(tiny_model_dir, tmp_path / f"a{seed}", seed, **lora)
        state = read_adapter(str(folder))
        assert unmergeable_reason(model, state) is None
        merged.apply(model, state)
        with torch.no_grad():
            got = model(input_ids=ids).logits
        assert torch.allclose(got, peft_logits(tiny_model_dir, folder, ids), atol=1e-4)
    # The last adapter touched o_proj only: the earlier layers are back to their exact originals.
    originals = dict(tiny_loaded.model.named_parameters())
    for name, param in model.named_parameters():
        if "o_proj" not in name:
            assert torch.equal(param, originals[name]), name
    merged.restore(model)
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, base_logits)


def test_bf16_merge_is_as_close_to_the_policy_as_bf16_itself(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """In bf16 the merge rounds ``W0 + delta`` once; the sampler then stays about as close to
    the exact (fp32) policy as the trainer's own bf16 forward (bf16 base, fp32 LoRA) is."""
    from osmosis_trainer.models import load_model

    folder = save_adapter(tiny_model_dir, tmp_path / "a", 1, std=0.05, target_modules="all-linear")
    ids = torch.tensor([[1, 5, 9, 13, 2, 7, 11, 3, 8, 4]])

    def logprobs(model: Any) -> Any:
        with torch.no_grad():
            return model(input_ids=ids).logits.float().log_softmax(-1)

    exact = logprobs(peft_reference(tiny_model_dir, folder))
    trained = logprobs(peft_reference(tiny_model_dir, folder, dtype="bfloat16"))
    base = load_model(str(tiny_model_dir), dtype="bfloat16").model.eval()
    assert base.dtype == torch.bfloat16
    MergedLoRA().apply(base, read_adapter(str(folder)))
    assert all(p.dtype == torch.bfloat16 for p in base.parameters())
    served = logprobs(base)

    def error(got: Any) -> float:  # mean absolute logprob error against the exact policy
        return float((got - exact).abs().mean())

    assert 0 < error(served) <= 1.5 * error(trained), (error(served), error(trained))
    # The adapter moved the policy far more than bf16 rounding did: it is served, not lost.
    base_only = logprobs(load_model(str(tiny_model_dir), dtype="bfloat16").model.eval())
    assert error(base_only) > 5 * error(served)


def test_what_is_not_merged(tiny_loaded: Any, tiny_model_dir: Path, tmp_path: Path) -> None:
    model = tiny_loaded.model
    dora = read_adapter(str(save_adapter(tiny_model_dir, tmp_path / "dora", 1, use_dora=True)))
    assert unmergeable_reason(model, dora) == "use_dora"
    plain = read_adapter(str(save_adapter(tiny_model_dir, tmp_path / "plain", 2)))
    bad = copy.copy(plain)
    bad.weights = {k: v for k, v in plain.weights.items() if "q_proj.lora_B" not in k}
    with pytest.raises(ValueError, match="lacks lora_B"):
        lora_deltas(model, bad)
    wrong = copy.copy(plain)
    wrong.weights = {k: v[:, :3] if "lora_A" in k else v for k, v in plain.weights.items()}
    with pytest.raises(ValueError, match="shapes"):
        lora_deltas(model, wrong)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("lora_bias", True),
        ("use_qalora", True),
        ("layer_replication", [[0, 1]]),
        ("target_parameters", ["mlp.experts.down_proj"]),
        ("alpha_pattern", {"q_proj": 4}),
        ("a_field_of_a_later_peft", 1),
    ],
)
def test_a_config_field_off_the_allow_list_is_served_by_peft(
    tiny_loaded: Any, tiny_model_dir: Path, tmp_path: Path, field: str, value: object
) -> None:
    plain = read_adapter(str(save_adapter(tiny_model_dir, tmp_path / "plain", 2)))
    assert unmergeable_reason(tiny_loaded.model, plain) is None
    changed = copy.copy(plain)
    changed.config = {**plain.config, field: value}
    assert unmergeable_reason(tiny_loaded.model, changed) in (field, f"{field} {value!r}")
    # Left at its plain value, a field the merge does not know does not stop it.
    unknown = copy.copy(plain)
    unknown.config = {**plain.config, "a_field_of_a_later_peft": None}
    assert unmergeable_reason(tiny_loaded.model, unknown) is None


def test_deltas_are_peft_own(tiny_loaded: Any, tiny_model_dir: Path, tmp_path: Path) -> None:
    from peft import PeftModel

    folder = save_adapter(tiny_model_dir, tmp_path / "rs", 3, use_rslora=True)
    deltas = lora_deltas(tiny_loaded.model, read_adapter(str(folder)))
    reference = PeftModel.from_pretrained(copy.deepcopy(tiny_loaded.model), str(folder))
    layer: Any = reference.get_submodule("base_model.model.model.layers.0.self_attn.q_proj")
    expected = layer.get_delta_weight("default")
    assert torch.equal(deltas["model.layers.0.self_attn.q_proj.weight"], expected)


async def test_engine_switches_between_merged_and_peft_serving(
    tiny_loaded: Any, tiny_model_dir: Path, tmp_path: Path
) -> None:
    engine = HFEngine(tiny_loaded, device="cpu", seed=0)
    try:
        folders = [
            save_adapter(tiny_model_dir, tmp_path / "m1", 1),  # merged
            save_adapter(tiny_model_dir, tmp_path / "d2", 2, use_dora=True),  # peft layers
            save_adapter(tiny_model_dir, tmp_path / "m3", 3),  # stays on peft (already wrapped)
        ]
        for version, folder in enumerate(folders, start=1):
            await engine.load_adapter(str(folder), version)
            res = await engine.generate(_REQ)
            assert _served_logprobs_match_peft(tiny_model_dir, folder, res), version
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
    engine = HFEngine(tiny_loaded, device="cpu", seed=0)
    try:
        await engine.load_adapter(str(save_adapter(tiny_model_dir, tmp_path / "m1", 1)), 1)
        before = await engine.generate(_REQ)
        bad = _broken_adapter(tiny_model_dir, tmp_path / "dora", use_dora=True)
        with pytest.raises(EngineError, match="could not load adapter"):
            await engine.load_adapter(str(bad), 2)
        after = await engine.generate(_REQ)
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
    try:
        # The copy costs no weight memory: its parameters are the owner's tensors.
        assert all(p is owner[n] for n, p in engine.model.named_parameters())
        for version, seed in ((1, 1), (2, 2)):  # the second re-fills the merged buffers
            folder = save_adapter(tiny_model_dir, tmp_path / f"m{seed}", seed)
            await engine.load_adapter(str(folder), version)
            res = await engine.generate(_REQ)
            assert _served_logprobs_match_peft(tiny_model_dir, folder, res), version
        served = dict(engine.model.named_parameters())
        adapted = "model.layers.0.self_attn.q_proj.weight"
        assert served[adapted] is not owner[adapted]  # a merged buffer of the engine's own
        assert served["model.embed_tokens.weight"] is owner["model.embed_tokens.weight"]
        assert all(torch.equal(p, before[n]) for n, p in owner.items())
    finally:
        await engine.close()


async def test_released_merged_weights_come_back_before_the_next_batch(
    tiny_loaded: Any, tiny_model_dir: Path, tmp_path: Path
) -> None:
    owner = dict(tiny_loaded.model.named_parameters())
    adapted = "model.layers.0.self_attn.q_proj.weight"
    engine = HFEngine(tiny_loaded, device="cpu", seed=0, share_weights=True)
    try:
        await engine.release_idle_memory()  # nothing merged yet: a no-op
        first = save_adapter(tiny_model_dir, tmp_path / "m1", 1)
        await engine.load_adapter(str(first), 1)
        before = await engine.generate(_REQ)
        await engine.release_idle_memory()
        # The merged copy is gone: every parameter is the owner's again.
        assert all(p is owner[n] for n, p in engine.model.named_parameters())
        after = await engine.generate(_REQ)
        assert after.completion_token_ids == before.completion_token_ids
        # Not bit-equal: the second call reuses the cached prompt head (the base model's
        # logprobs differ by far more).
        assert after.logprobs == pytest.approx(before.logprobs, abs=1e-5)
        assert after.policy_version == 1
        assert dict(engine.model.named_parameters())[adapted] is not owner[adapted]
        # A load after the batch's re-merge writes into its buffers (outside inference mode),
        # and a load straight after a release merges into fresh ones.
        for version in (2, 3):
            folder = save_adapter(tiny_model_dir, tmp_path / f"m{version}", version)
            await engine.load_adapter(str(folder), version)
            res = await engine.generate(_REQ)
            assert _served_logprobs_match_peft(tiny_model_dir, folder, res), version
            await engine.release_idle_memory()
    finally:
        await engine.close()


async def test_a_failed_load_after_a_release_serves_the_previous_adapter(
    tiny_loaded: Any, tiny_model_dir: Path, tmp_path: Path
) -> None:
    engine = HFEngine(tiny_loaded, device="cpu", seed=0)
    try:
        first = save_adapter(tiny_model_dir, tmp_path / "m1", 1)
        await engine.load_adapter(str(first), 1)
        await engine.release_idle_memory()
        bad = _broken_adapter(tiny_model_dir, tmp_path / "bad")
        with pytest.raises(EngineError, match="could not load adapter"):
            await engine.load_adapter(str(bad), 2)
        res = await engine.generate(_REQ)
        assert res.policy_version == 1
        assert _served_logprobs_match_peft(tiny_model_dir, first, res)
    finally:
        await engine.close()
