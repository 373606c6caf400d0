"""Random LoRA adapters for the tiny test model, and peft's own model as the reference."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

__all__ = ["peft_logits", "peft_reference", "save_adapter"]


def save_adapter(model_dir: Path, out: Path, seed: int, *, std: float = 0.3, **lora: Any) -> Path:
    """Save a LoRA adapter of ``model_dir`` with N(0, std) weights (both A and B, so it
    changes the outputs); ``lora`` overrides the LoraConfig (default r=4 on q, v and down)."""
    from peft import LoraConfig, get_peft_model

    from osmosis_trainer.models import load_model

    torch.manual_seed(seed)
    r = int(lora.pop("r", 4))
    settings = {"r": r, "lora_alpha": 2 * r, "target_modules": ["q_proj", "v_proj", "down_proj"]}
    peft_model = get_peft_model(
        load_model(str(model_dir)).model,
        LoraConfig(**{**settings, **lora}, init_lora_weights=False),
    )
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_" in name:
                p.normal_(0.0, std)
    peft_model.save_pretrained(out)
    return out


def peft_reference(model_dir: Path, adapter: Path, dtype: str = "float32") -> Any:
    """The base model with ``adapter`` through peft's layers: the policy as trained."""
    from peft import PeftModel

    from osmosis_trainer.models import load_model

    return PeftModel.from_pretrained(
        load_model(str(model_dir), dtype=dtype).model, str(adapter)
    ).eval()


def peft_logits(model_dir: Path, adapter: Path, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        logits: torch.Tensor = peft_reference(model_dir, adapter)(input_ids=ids).logits
    return logits
