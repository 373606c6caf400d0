"""Loading PEFT (LoRA) adapters into the HF engine's model, atomically."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias, cast

from osmosis_ai.errors import UnreadableFileError
from osmosis_ai.safe_io import read_json_object
from osmosis_ai.serving import EngineError

if TYPE_CHECKING:
    import torch
    from peft import PeftModel
    from transformers import PreTrainedModel

    Served: TypeAlias = PreTrainedModel | PeftModel
    """The model the engine serves: the bare base, or the base wrapped with peft's layers."""

__all__ = ["AdapterLoadFailed", "AdapterState", "apply_adapter", "read_adapter"]

# Config keys that do not change the adapter's structure.
_IGNORED_CONFIG_KEYS = {"base_model_name_or_path", "revision", "inference_mode", "task_type"}


@dataclass
class AdapterState:
    """An adapter read from disk: its config and weights, ready to be applied."""

    path: str
    config: dict[str, Any]  # adapter_config.json as read: JSON, with peft's own keys
    weights: dict[str, torch.Tensor]


class AdapterLoadFailed(Exception):
    """Loading failed; ``model`` is what to serve now (the previous adapter, restored)."""

    def __init__(self, model: Served, cause: Exception) -> None:
        self.model = model
        self.cause = cause
        super().__init__(str(cause))


def read_adapter(path: str) -> AdapterState:
    """Read ``adapter_config.json`` and the weights of a PEFT adapter folder."""
    folder = Path(path)
    cfg_file = folder / "adapter_config.json"
    if not cfg_file.exists() and not cfg_file.is_symlink():
        raise EngineError(
            f"{folder} is not a PEFT adapter folder (no adapter_config.json); save adapters "
            "with model.save_pretrained(folder)",
            status_code=400,
            code="bad_adapter",
        )
    try:  # safe_io: a regular file of the folder, size, depth and integer caps
        config = read_json_object(cfg_file, under=folder)
    except UnreadableFileError as exc:
        raise EngineError(str(exc), status_code=400, code="bad_adapter") from None
    st, binf = folder / "adapter_model.safetensors", folder / "adapter_model.bin"
    if st.is_file():
        from safetensors.torch import load_file

        weights = load_file(str(st))
    elif binf.is_file():
        import torch

        weights = torch.load(binf, map_location="cpu", weights_only=True)
    else:
        raise EngineError(
            f"{folder} holds no adapter_model.safetensors or adapter_model.bin",
            status_code=400,
            code="bad_adapter",
        )
    return AdapterState(path=str(folder), config=config, weights=weights)


def _structure(config: dict[str, Any]) -> dict[str, object]:
    return {k: v for k, v in config.items() if k not in _IGNORED_CONFIG_KEYS}


def _load_weights(model: PeftModel, weights: dict[str, torch.Tensor]) -> None:
    from peft import set_peft_model_state_dict

    result = set_peft_model_state_dict(model, weights)
    unexpected = list(getattr(result, "unexpected_keys", []) or [])
    missing = [k for k in (getattr(result, "missing_keys", []) or []) if "lora_" in k]
    if unexpected or missing:
        raise ValueError(
            f"adapter weights do not match the model: {len(unexpected)} unexpected keys "
            f"(e.g. {unexpected[:2]}), {len(missing)} missing LoRA keys (e.g. {missing[:2]})"
        )


def _adapter_snapshot(model: PeftModel) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items() if "lora_" in k}


def _wrap(base: PreTrainedModel, state: AdapterState) -> PeftModel:
    from peft import PeftConfig, get_peft_model

    settings = {**state.config, "inference_mode": True}
    config = PeftConfig.from_peft_type(**settings)  # type: ignore[no-untyped-call,unused-ignore]
    # Not ``mixed``: a PeftModel (peft types the result as PeftModel | PeftMixedModel).
    wrapped = cast("PeftModel", get_peft_model(base, config))
    try:
        _load_weights(wrapped, state.weights)
    except Exception:
        wrapped.unload()  # back to the plain base model
        raise
    wrapped.eval()
    return wrapped


def apply_adapter(model: Served, current: AdapterState | None, new: AdapterState) -> Served:
    """Serve ``new`` on ``model``; returns the (possibly newly wrapped) model.

    The first load wraps the model with peft; a later load with the same structure copies
    the weights into the existing adapter in place; a different structure (rank, targets)
    rebuilds the wrapper. On any failure the previous adapter (or the bare base model) is
    restored before the error propagates.
    """
    from peft import PeftModel

    if not isinstance(model, PeftModel):
        try:
            return _wrap(model, new)
        except Exception as exc:
            raise AdapterLoadFailed(model, exc) from exc
    if current is not None and _structure(current.config) == _structure(new.config):
        snapshot = _adapter_snapshot(model)
        try:
            _load_weights(model, new.weights)
        except Exception as exc:
            model.load_state_dict(snapshot, strict=False)
            raise AdapterLoadFailed(model, exc) from exc
        return model
    base = model.unload()
    try:
        return _wrap(base, new)
    except Exception as exc:
        restored = _wrap(base, current) if current is not None else base
        raise AdapterLoadFailed(restored, exc) from exc
