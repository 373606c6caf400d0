"""Serving a LoRA adapter merged into the base weights: ``W = W0 + scale · B @ A``.

A merged model decodes at the base model's speed. peft's unmerged layers add a dtype cast, two
small matmuls and several Python calls per linear layer and token: on the embedded
SmolLM2-135M with bf16 weights (CPU, batch 32) they nearly double the time of a decoding step
(see BENCHMARKS.md, trainer_real). The base weights the adapter touches are kept, so each new
adapter is merged into the originals and no rounding accumulates over the run. peft's
in-place ``unmerge_adapter``/``merge_adapter`` cycle is the library alternative; in bf16 it
left 3.4 % of the served weights off the exact merge and changed 3.7 % of the base weights
after 20 adapters, and needs weights of the engine's own (BENCHMARKS.md, ``merge``).

The update is computed in fp32 and rounded once to the weights' dtype. In bf16 that rounding
can drop a very small update (below half a unit in the last place of the weight), so the
sampler runs a policy a little off the trained one; as in TRL, which merges the adapter into
its bf16 vLLM weights, the trainer's importance-sampling correction against the sampler's own
logprobs accounts for it, and the ``mismatch_kl`` metric shows its size.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, cast

from osmosis_trainer.engines._hf_adapter import AdapterState

if TYPE_CHECKING:
    import torch

__all__ = ["MergedLoRA", "lora_factors", "unmergeable_reason"]

_PREFIX = "base_model.model."


def unmergeable_reason(model: torch.nn.Module, state: AdapterState) -> str | None:
    """Why ``state`` cannot be merged into ``model`` (``None``: it can).

    Plain LoRA on ``nn.Linear`` layers merges; DoRA, per-module rank or alpha patterns, extra
    trained modules, trained biases and embedding adapters are served by peft's unmerged
    layers instead.
    """
    import torch

    cfg = state.config
    if str(cfg.get("peft_type", "")).upper() != "LORA":
        return f"peft_type {cfg.get('peft_type')!r}"
    for key in ("use_dora", "fan_in_fan_out"):
        if cfg.get(key):
            return key
    for key in ("rank_pattern", "alpha_pattern", "modules_to_save", "layers_to_transform"):
        if cfg.get(key):
            return key
    if cfg.get("bias", "none") != "none":
        return f"bias {cfg.get('bias')!r}"
    if any(".lora_A." not in k and ".lora_B." not in k for k in state.weights):
        return "weights other than lora_A/lora_B"
    shared: dict[int, int] = {}
    for _, param in model.named_parameters(remove_duplicate=False):
        shared[param.data_ptr()] = shared.get(param.data_ptr(), 0) + 1
    modules = dict(model.named_modules())
    for key in state.weights:
        layer = modules.get(key.removeprefix(_PREFIX).split(".lora_")[0])
        if layer is not None and type(layer) is not torch.nn.Linear:
            return f"{type(layer).__name__} layers (only plain nn.Linear merges)"
        weight = getattr(layer, "weight", None)
        if isinstance(weight, torch.Tensor) and shared.get(weight.data_ptr(), 0) > 1:
            return "an adapted layer's weight is tied to another (e.g. lm_head and embeddings)"
    return None


def lora_factors(
    model: torch.nn.Module, state: AdapterState
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """The factors of every adapted layer's update ``scale · B @ A``: ``{param name:
    (scale · B [out, r], A [r, in])}``, fp32, on the layer's device.

    Raises:
        ValueError: a key names no layer of the model, a pair is incomplete, or shapes differ.
    """
    import torch

    cfg = state.config
    r, alpha = int(cfg["r"]), float(cfg.get("lora_alpha", cfg["r"]))
    scale = alpha / math.sqrt(r) if cfg.get("use_rslora") else alpha / r
    modules = dict(model.named_modules())
    pairs: dict[str, dict[str, torch.Tensor]] = {}
    for key, tensor in state.weights.items():
        name = key.removeprefix(_PREFIX)
        which = "A" if ".lora_A." in name else "B"
        module = name.split(f".lora_{which}.")[0]
        pairs.setdefault(module, {})[which] = tensor
    factors: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    for module, pair in pairs.items():
        layer = modules.get(module)
        if not isinstance(layer, torch.nn.Linear):
            raise ValueError(f"adapter key for {module!r}: the model has no linear layer there")
        if set(pair) != {"A", "B"}:
            raise ValueError(f"adapter for {module!r} lacks lora_{({'A', 'B'} - set(pair)).pop()}")
        a, b = pair["A"].float(), pair["B"].float()  # [r, in], [out, r]
        weight = layer.weight
        if (
            a.shape[1] != weight.shape[1]
            or b.shape[0] != weight.shape[0]
            or a.shape[0] != b.shape[1]
        ):
            raise ValueError(
                f"adapter for {module!r} has shapes A {tuple(a.shape)} B {tuple(b.shape)}; the "
                f"layer's weight is {tuple(weight.shape)}"
            )
        factors[f"{module}.weight"] = ((b * scale).to(weight.device), a.to(weight.device))
    if not factors:
        raise ValueError("the adapter holds no LoRA weights")
    return factors


class MergedLoRA:
    """Merges adapters into a plain model's weights without writing into the originals.

    An adapted layer's weight is swapped for a merged parameter of its own (``W0 + delta``,
    re-filled in place by later adapters); the original parameter object is kept and put back
    on :meth:`restore`. The originals are never written, so they may be shared with their
    owner (``HFEngine(share_weights=True)``: a trainer's frozen base): merging costs one copy
    of the adapted layers, and no copy of the originals.
    """

    def __init__(self) -> None:
        self._originals: dict[str, torch.nn.Parameter] = {}

    @property
    def active(self) -> bool:
        return bool(self._originals)

    def apply(self, model: torch.nn.Module, state: AdapterState) -> None:
        """Serve ``state``; on error (bad keys or shapes) the model is left as it was."""
        import torch

        factors = lora_factors(model, state)  # validates everything before touching the model
        modules = dict(model.named_modules())
        with torch.no_grad():
            for name in [n for n in self._originals if n not in factors]:
                _put(modules, name, self._originals.pop(name))
            for name, (b, a) in factors.items():
                current = _get(modules, name)
                original = self._originals.setdefault(name, current)
                # One layer at a time, in fp32, rounded once to the weights' dtype below.
                merged = torch.addmm(original.float(), b, a)
                if current is original:  # first adapter on this layer: a buffer of its own
                    fresh = merged.to(original.dtype)
                    _put(modules, name, torch.nn.Parameter(fresh, requires_grad=False))
                else:
                    current.copy_(merged)

    def restore(self, model: torch.nn.Module) -> None:
        """Put the base weights back (before serving an adapter peft's way)."""
        modules = dict(model.named_modules())
        for name, original in self._originals.items():
            _put(modules, name, original)
        self._originals.clear()


def _get(modules: dict[str, torch.nn.Module], name: str) -> torch.nn.Parameter:
    owner, _, attr = name.rpartition(".")
    # ``name`` is a linear layer's weight (``lora_factors`` checked it): a Parameter.
    return cast("torch.nn.Parameter", getattr(modules[owner], attr))


def _put(modules: dict[str, torch.nn.Module], name: str, param: torch.nn.Parameter) -> None:
    owner, _, attr = name.rpartition(".")
    setattr(modules[owner], attr, param)
