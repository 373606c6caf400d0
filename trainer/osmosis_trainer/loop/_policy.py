"""The trainable policy: a causal LM with a peft LoRA adapter, and its token logprobs."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, cast

import torch

from osmosis_trainer.grpo import entropy_from_logprobs
from osmosis_trainer.loop._batch import SharedPrefix
from osmosis_trainer.loop._head import chunked_applies, chunked_logprobs

if TYPE_CHECKING:
    from peft import PeftModel
    from transformers import PreTrainedModel

    from osmosis_trainer._protocols import DecoderLM

__all__ = [
    "adapter_disabled",
    "attach_lora",
    "lora_compute",
    "load_adapter_weights",
    "lora_parameters",
    "masked_hidden",
    "masked_logits",
    "token_logprobs",
]


def attach_lora(
    model: PreTrainedModel,
    *,
    r: int,
    alpha: int,
    dropout: float,
    target_modules: list[str] | str,
    seed: int,
) -> PeftModel:
    """Wrap ``model`` with a fresh LoRA adapter (base weights frozen).

    The LoRA ``A`` matrices are initialised from ``seed`` (``B`` starts at zero), so two runs
    with the same seed start from the same adapter.
    """
    from peft import LoraConfig, get_peft_model

    targets: list[str] | str = target_modules
    if isinstance(targets, list) and targets == ["all-linear"]:
        targets = "all-linear"
    config = LoraConfig(
        r=r,
        lora_alpha=alpha,
        lora_dropout=dropout,
        target_modules=targets,
        bias="none",
        task_type="CAUSAL_LM",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        peft_model = get_peft_model(model, config)
    return peft_model


def lora_parameters(model: torch.nn.Module) -> list[tuple[str, torch.nn.Parameter]]:
    """The trainable (LoRA) parameters, by name."""
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad]


def adapter_disabled(model: torch.nn.Module) -> AbstractContextManager[None]:
    """Context in which ``model`` acts as its base model (peft ``disable_adapter``)."""
    disable = getattr(model, "disable_adapter", None)
    return disable() if callable(disable) else nullcontext()


@contextmanager
def lora_compute(model: torch.nn.Module) -> Iterator[None]:
    """Context for a forward pass whose LoRA layers compute in the base weights' precision.

    peft keeps the adapter in fp32 over a bf16/fp16 base and casts each LoRA layer's input to
    fp32: on long multi-turn sequences that made a training forward and backward ~20 % slower
    (BENCHMARKS.md, ``update``). Here the LoRA matmuls run in the base's dtype under
    ``torch.autocast`` (with peft's own ``disable_input_dtype_casting``), while the adapter's
    weights, gradients and optimiser state stay fp32: mixed precision as TRL's ``bf16=True``
    does it. An fp32 base, or a model without a fp32 adapter, is left untouched.
    """
    base = _causal_lm(model).get_input_embeddings().weight
    adapter = next((p.dtype for p in model.parameters() if p.requires_grad), None)
    if base.dtype not in (torch.bfloat16, torch.float16) or adapter != torch.float32:
        yield
        return
    from peft.helpers import disable_input_dtype_casting

    with ExitStack() as stack:
        stack.enter_context(disable_input_dtype_casting(model))
        stack.enter_context(torch.autocast(base.device.type, dtype=base.dtype))
        yield


def _causal_lm(model: torch.nn.Module) -> DecoderLM:
    """The causal LM under peft's wrapper (``model`` itself when it has none)."""
    get_base = getattr(model, "get_base_model", None)
    return cast("DecoderLM", get_base() if callable(get_base) else model)


def masked_hidden(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    mask: torch.Tensor,
    *,
    prefix: SharedPrefix | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The decoder's last hidden states at the ``N`` masked positions and the ``N`` target ids.

    The decoder runs over the whole sequence; the LM head is left to the caller, which runs
    it only where a token trains.
    """
    lm = _causal_lm(model)
    with lora_compute(model):
        if prefix is not None and prefix.packed is not None:
            from osmosis_trainer.loop._packed import packed_hidden

            dtype = lm.get_input_embeddings().weight.dtype
            predicting = packed_hidden(lm.get_decoder(), prefix.packed, dtype)  # [B, S, H]
            targets = input_ids[mask]  # [N]
        elif prefix is not None:
            from osmosis_trainer.loop._prefix import shared_prefix_hidden

            predicting = shared_prefix_hidden(lm.get_decoder(), input_ids, prefix)  # [B, S, H]
            targets = input_ids[mask]  # [N]
        else:
            hidden = lm.get_decoder()(input_ids=input_ids, use_cache=False).last_hidden_state
            predicting = hidden[:, :-1]  # [B, T-1, H]
            targets = input_ids[:, 1:][mask]  # [N]
    return predicting[mask], targets  # [N, H], [N]


def masked_logits(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    prefix: SharedPrefix | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The fp32 next-token logits at the ``N`` masked positions and the ``N`` target ids.

    The forward pass :func:`token_logprobs` (RL) and the warm start's cross-entropy share:
    the decoder over the whole sequence, the LM head only where a token trains.
    """
    lm = _causal_lm(model)
    selected, targets = masked_hidden(model, input_ids, mask, prefix=prefix)
    with lora_compute(model):
        logits = lm.get_output_embeddings()(selected).float()  # [N, V]
    softcap = getattr(lm.config, "final_logit_softcapping", None)
    if softcap:
        logits = torch.tanh(logits / softcap) * softcap
    if temperature != 1.0:
        logits = logits / temperature
    return logits, targets


def token_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    prefix: SharedPrefix | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probabilities of the masked next tokens, computing the LM head only where needed.

    The decoder runs over the whole sequence, but the vocabulary projection (the costly part
    for small models with big vocabularies) runs only on the ``N`` positions that train.
    With ``prefix`` the rows continue shared prompts (see :mod:`._prefix`): ``input_ids`` and
    ``mask`` are then ``[B, S]`` continuation tokens, unshifted.

    Args:
        model: the (peft-wrapped) causal LM.
        input_ids: ``[B, T]`` right-padded ids.
        mask: ``[B, T-1]`` bool; position ``t`` holds the logprob of ``input_ids[:, t+1]``.
        temperature: logits are divided by it, matching the sampler's processed logprobs.
        with_entropy: also return the (detached) entropy of each masked position.
        prefix: the shared prompts the rows continue, if any.

    Returns:
        ``(logp, entropy | None)`` shaped like ``mask``, zero where ``mask`` is 0.
    """
    lm = _causal_lm(model)
    head = lm.get_output_embeddings()
    softcap = getattr(lm.config, "final_logit_softcapping", None)
    if chunked_applies(int(mask.sum()), head, softcap=softcap):
        selected, targets = masked_hidden(model, input_ids, mask, prefix=prefix)
        weight = cast("torch.nn.Linear", head).weight  # chunked_applies checked the type
        picked, ent = chunked_logprobs(
            selected, weight, targets, temperature=temperature, with_entropy=with_entropy
        )
    else:
        logits, targets = masked_logits(
            model, input_ids, mask, temperature=temperature, prefix=prefix
        )  # [N, V], [N]
        logp_all = torch.log_softmax(logits, dim=-1)  # [N, V]
        picked = logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # [N]
        with torch.no_grad():
            ent = entropy_from_logprobs(logp_all.detach()) if with_entropy else picked
    logp = torch.zeros(mask.shape, dtype=picked.dtype, device=picked.device)  # [B, T-1]
    logp = logp.masked_scatter(mask, picked)
    entropy = None
    if with_entropy:
        entropy = torch.zeros(mask.shape, dtype=ent.dtype, device=ent.device)
        entropy = entropy.masked_scatter(mask, ent.detach())
    return logp, entropy


def load_adapter_weights(model: torch.nn.Module, adapter_dir: str | Path) -> None:
    """Load a saved PEFT adapter's weights into ``model``'s active adapter, in place."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    folder = Path(adapter_dir)
    weights = folder / "adapter_model.safetensors"
    if not weights.exists():
        raise FileNotFoundError(f"no adapter_model.safetensors in {folder}")
    result = set_peft_model_state_dict(model, load_file(str(weights)))
    unexpected = list(getattr(result, "unexpected_keys", []) or [])
    if unexpected:
        raise ValueError(
            f"adapter in {folder} does not match the model's LoRA layout "
            f"(unexpected keys such as {unexpected[:3]}); was it trained with other [lora] "
            "settings?"
        )
