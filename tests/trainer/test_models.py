"""``[training] dtype``: how ``auto`` resolves, and a bf16 base with fp32 LoRA training."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from osmosis_trainer.models import load_model, training_dtype


def test_explicit_dtype_is_kept() -> None:
    assert training_dtype("float32", "cuda") == "float32"
    assert training_dtype("bfloat16", "cpu") == "bfloat16"


def test_auto_is_bf16_on_cuda() -> None:
    assert training_dtype("auto", "cuda:1") == "bfloat16"


@pytest.mark.parametrize(
    ("native", "bf16_s", "expected"),
    [(True, 0.5e-3, "bfloat16"), (True, 1.6e-3, "float32"), (False, 0.5e-3, "float32")],
)
def test_auto_on_cpu_needs_native_bf16_that_is_not_slower(
    monkeypatch: pytest.MonkeyPatch, native: bool, bf16_s: float, expected: str
) -> None:
    from osmosis_trainer import _cpu_dtype

    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: native)
    probe = _cpu_dtype.DtypeProbe(fp32_s=1e-3, bf16_s=bf16_s)
    monkeypatch.setattr(_cpu_dtype, "probe_cpu_matmul", lambda: probe)
    assert training_dtype("auto", "cpu") == expected


def test_bf16_base_trains_fp32_lora(tiny_model_dir: Path) -> None:
    from osmosis_ai.config import AlgorithmConfig
    from osmosis_trainer.loop import resolve_settings
    from osmosis_trainer.loop._batch import TrainSequence
    from osmosis_trainer.loop._optim import build_optimizer
    from osmosis_trainer.loop._policy import attach_lora, lora_parameters
    from osmosis_trainer.loop._update import policy_update

    base = load_model(str(tiny_model_dir), dtype="bfloat16").model
    model = attach_lora(base, r=4, alpha=8, dropout=0.0, target_modules="all-linear", seed=0)
    lora = dict(lora_parameters(model))
    assert lora and all(p.dtype == torch.float32 for p in lora.values())
    frozen = [p for p in model.parameters() if not p.requires_grad]
    assert frozen and all(p.dtype == torch.bfloat16 for p in frozen)
    before = {n: p.detach().clone() for n, p in lora.items()}
    seqs = [
        TrainSequence(list(range(3, 15 + i)), [0] * 4 + [1] * (8 + i), [-1.0] * (12 + i),
                      advantage=(-1.0) ** i)
        for i in range(4)
    ]
    settings = resolve_settings(n_rows=1, pad_id=0, algorithm=AlgorithmConfig())
    stats = policy_update(model, build_optimizer(model, lr=1e-2), seqs, settings)
    assert stats.tokens > 0 and stats.grad_norm > 0
    assert any(not torch.equal(before[n], p) for n, p in lora.items())
