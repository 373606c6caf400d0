"""save_adapter: standard PEFT files that follow the live LoRA weights step after step."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from osmosis_trainer.checkpoints import save_adapter  # noqa: E402
from osmosis_trainer.loop._policy import attach_lora  # noqa: E402


def test_each_save_holds_the_current_weights_and_loads_in_peft(
    tiny_loaded: Any, tmp_path: Path
) -> None:
    from peft import PeftModel
    from safetensors.torch import load_file

    model = attach_lora(
        copy.deepcopy(tiny_loaded.model), r=4, alpha=8, dropout=0.0,
        target_modules=["all-linear"], seed=0,
    )
    lora_b = next(p for n, p in model.named_parameters() if "lora_B" in n)
    first = load_file(str(save_adapter(model, tmp_path / "s1") / "adapter_model.safetensors"))
    with torch.no_grad():
        lora_b.add_(0.5)  # an optimizer step changes the same tensors in place
    second_dir = save_adapter(model, tmp_path / "s2", durable=False)
    second = load_file(str(second_dir / "adapter_model.safetensors"))
    assert first.keys() == second.keys() and all(".lora_" in k for k in first)
    changed = [k for k in first if not torch.equal(first[k], second[k])]
    assert len(changed) == 1 and "lora_B" in changed[0]
    loaded = PeftModel.from_pretrained(copy.deepcopy(tiny_loaded.model), str(second_dir))
    again = dict(loaded.named_parameters())
    name = next(n for n, p in model.named_parameters() if p is lora_b)
    assert torch.equal(again[name], lora_b)
