"""Serving a LoRA adapter merged into the base weights: ``W = W0 + delta``, delta by peft.

A merged model decodes at the base model's speed. peft's unmerged layers add a dtype cast, two
small matmuls and several Python calls per linear layer and token: on the embedded
SmolLM2-135M with bf16 weights (CPU, batch 32) they nearly double the time of a decoding step.
Each layer's update is peft's own (``LoraLayer.get_delta_weight``: its scaling, rsLoRA and
layout rules), computed in fp32 and rounded once to the weights' dtype. The base weights the
adapter touches are kept, so each new adapter is merged into the originals and no rounding
accumulates over the run; peft's in-place ``merge_adapter``/``unmerge_adapter`` cycle rounds
twice per adapter in bf16 and needs weights of the engine's own (BENCHMARKS.md, ``merge``).

Only adapters whose every config field is on an allow-list merge (:data:`ANY_VALUE` fields,
and fields left at their plain value: ``None``, ``False``, empty, ``"none"``); any other field,
including ones a later peft adds, sends the adapter to peft's unmerged layers, which implement
them all. In bf16 the rounding can drop a very small update, so the sampler runs a policy a
little off the trained one; the trainer's importance-sampling correction against the
sampler's own logprobs accounts for it, and the ``mismatch_kl`` metric shows its size.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from osmosis_trainer.engines._hf_adapter import AdapterState

if TYPE_CHECKING:
    import torch
    from peft.tuners.lora import Linear as LoraLinear

__all__ = ["ANY_VALUE", "MergedLoRA", "lora_deltas", "unmergeable_reason"]

_PREFIX = "base_model.model."
_NAME = "merge"
ANY_VALUE = frozenset(
    {
        "peft_type",
        "task_type",
        "auto_mapping",
        "peft_version",
        "base_model_name_or_path",
        "revision",
        "inference_mode",
        "r",
        "lora_alpha",
        "use_rslora",
        "lora_dropout",
        "target_modules",
        "exclude_modules",
        "init_lora_weights",
        "layers_pattern",
        "megatron_core",
        "qalora_group_size",
        "runtime_config",
    }
)
"""LoraConfig fields a merge may see with any value: descriptive ones, ones that only act at
initialisation or in training (dropout), and ``r``/``lora_alpha``/``use_rslora``, which
peft's ``get_delta_weight`` applies. ``layers_pattern``, ``megatron_core`` and
``qalora_group_size`` act only with a field that must stay plain (``layers_to_transform``,
``megatron_config``, ``use_qalora``); ``runtime_config`` holds no weights' semantics."""
_PLAIN: tuple[object, ...] = (None, False, "none", {}, [], "")


def unmergeable_reason(model: torch.nn.Module, state: AdapterState) -> str | None:
    """Why ``state`` cannot be merged into ``model`` (``None``: it can).

    A LoRA adapter merges when every config field is in :data:`ANY_VALUE` or plain, it holds
    only ``lora_A``/``lora_B`` weights, and each adapted layer is a plain ``nn.Linear`` whose
    weight no other parameter shares.
    """
    import torch

    cfg = state.config
    if str(cfg.get("peft_type", "")).upper() != "LORA":
        return f"peft_type {cfg.get('peft_type')!r}"
    for key, value in sorted(cfg.items()):
        if key not in ANY_VALUE and not any(value == plain for plain in _PLAIN):
            return key if value is True else f"{key} {value!r}"
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


def _pairs(
    model: torch.nn.Module, state: AdapterState
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """``{adapted layer name: (A [r, in], B [out, r])}``, checked against the model.

    Raises:
        ValueError: a key names no linear layer of the model, a pair is incomplete, or shapes
            differ.
    """
    import torch

    modules = dict(model.named_modules())
    pairs: dict[str, dict[str, torch.Tensor]] = {}
    for key, tensor in state.weights.items():
        name = key.removeprefix(_PREFIX)
        which = "A" if ".lora_A." in name else "B"
        pairs.setdefault(name.split(f".lora_{which}.")[0], {})[which] = tensor
    checked: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    for module, pair in pairs.items():
        layer = modules.get(module)
        if not isinstance(layer, torch.nn.Linear):
            raise ValueError(f"adapter key for {module!r}: the model has no linear layer there")
        if set(pair) != {"A", "B"}:
            raise ValueError(f"adapter for {module!r} lacks lora_{({'A', 'B'} - set(pair)).pop()}")
        a, b = pair["A"], pair["B"]
        if (
            a.shape[1] != layer.in_features
            or b.shape[0] != layer.out_features
            or a.shape[0] != b.shape[1]
        ):
            raise ValueError(
                f"adapter for {module!r} has shapes A {tuple(a.shape)} B {tuple(b.shape)}; the "
                f"layer's weight is {tuple(layer.weight.shape)}"
            )
        checked[module] = (a, b)
    if not checked:
        raise ValueError("the adapter holds no LoRA weights")
    return checked


class _Deltas:
    """peft LoRA layers, one per adapted layer, over weightless (meta) copies of the layers:
    they hold an adapter's A and B in fp32 and give ``get_delta_weight``. Kept between
    adapters of the same shape, so a new adapter only copies its factors in."""

    def __init__(self) -> None:
        self._layers: dict[str, LoraLinear] = {}
        self._config: dict[str, Any] = {}

    def _layer(self, name: str, layer: torch.nn.Linear, cfg: dict[str, Any]) -> LoraLinear:
        import torch
        from peft import LoraConfig
        from peft.tuners.lora import Linear as LoraLinear

        lora = self._layers.get(name)
        if lora is None or cfg != self._config:
            if cfg != self._config:
                self._layers.clear()
                self._config = cfg
            shell = torch.nn.Linear(
                layer.in_features, layer.out_features, bias=False, device="meta"
            )
            config = LoraConfig(**cfg, init_lora_weights=False)
            lora = LoraLinear(shell, _NAME, config, r=cfg["r"], lora_alpha=cfg["lora_alpha"])
            lora.lora_A.to_empty(device=layer.weight.device).float()
            lora.lora_B.to_empty(device=layer.weight.device).float()
            self._layers[name] = lora
        return lora

    def delta(
        self,
        name: str,
        layer: torch.nn.Linear,
        a: torch.Tensor,
        b: torch.Tensor,
        config: dict[str, Any],
    ) -> torch.Tensor:
        """peft's ``delta = scale · B @ A`` for ``layer`` (fp32, on the layer's device)."""
        cfg = {
            "r": int(config["r"]),
            "lora_alpha": config.get("lora_alpha", config["r"]),
            "use_rslora": bool(config.get("use_rslora", False)),
        }
        lora = self._layer(name, layer, cfg)
        factors: Any = (lora.lora_A, lora.lora_B)  # nn.ModuleDicts (peft types them loosely)
        factors[0][_NAME].weight.data.copy_(a)
        factors[1][_NAME].weight.data.copy_(b)
        delta: torch.Tensor = lora.get_delta_weight(_NAME)
        return delta


def lora_deltas(model: torch.nn.Module, state: AdapterState) -> dict[str, torch.Tensor]:
    """Every adapted layer's update as peft computes it: ``{param name: delta}`` (fp32).

    For tests and small models: :class:`MergedLoRA` computes one layer's at a time.

    Raises:
        ValueError: as :class:`MergedLoRA.apply`.
    """
    deltas, modules = _Deltas(), dict(model.named_modules())
    return {
        f"{name}.weight": deltas.delta(
            name, cast("torch.nn.Linear", modules[name]), a, b, state.config
        )
        for name, (a, b) in _pairs(model, state).items()
    }


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
        self._deltas = _Deltas()

    @property
    def active(self) -> bool:
        return bool(self._originals)

    def apply(self, model: torch.nn.Module, state: AdapterState) -> None:
        """Serve ``state``; on error (bad keys or shapes) the model is left as it was."""
        import torch

        pairs = _pairs(model, state)  # validates everything before touching the model
        modules = dict(model.named_modules())
        with torch.no_grad():
            for name in [n for n in self._originals if n.removesuffix(".weight") not in pairs]:
                _put(modules, name, self._originals.pop(name))
            for module, (a, b) in pairs.items():
                name = f"{module}.weight"
                current = _get(modules, name)
                original = self._originals.setdefault(name, current)
                layer = cast("torch.nn.Linear", modules[module])
                # One layer at a time, in fp32, rounded once to the weights' dtype below.
                delta = self._deltas.delta(module, layer, a, b, state.config)
                merged = delta.add_(original.float())
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
    # ``name`` is a linear layer's weight (``_pairs`` checked it): a Parameter.
    return cast("torch.nn.Parameter", getattr(modules[owner], attr))


def _put(modules: dict[str, torch.nn.Module], name: str, param: torch.nn.Parameter) -> None:
    owner, _, attr = name.rpartition(".")
    setattr(modules[owner], attr, param)
