"""What the trainer needs of a causal LM, its KV cache and its tokenizer, as typing Protocols.

transformers' ``PreTrainedModel`` / ``PeftModel``, ``DynamicCache`` and
``PreTrainedTokenizerBase`` fit them; so do the small doubles tests build. Only the members the
trainer calls are named, so a reader sees the whole seam here.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast

if TYPE_CHECKING:
    import torch
    from transformers import PretrainedConfig

__all__ = [
    "CausalLM",
    "CausalLMOutput",
    "ChatTokenizer",
    "Decoder",
    "DecoderLM",
    "DecoderOutput",
    "KVCache",
    "KVLayer",
    "Tokenizer",
    "decode_text",
]


class CausalLMOutput(Protocol):
    """A forward pass's output: ``logits`` ``[B, T, V]``."""

    @property
    def logits(self) -> torch.Tensor: ...


class KVLayer(Protocol):
    """One layer of a KV cache: ``keys`` / ``values`` ``[B, heads, L, head_dim]``."""

    keys: torch.Tensor
    values: torch.Tensor

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append ``[B, heads, T, head_dim]`` keys/values (the first call sets them)."""
        ...


class KVCache(Protocol):
    """A KV cache the decoding loop grows, filters by row and trims (a ``DynamicCache``)."""

    @property
    def layers(self) -> Sequence[KVLayer]: ...

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep only the rows ``indices`` (in place)."""
        ...


class CausalLM(Protocol):
    """A causal LM as the HF engine drives it (``PreTrainedModel`` or a ``PeftModel``)."""

    @property
    def config(self) -> PretrainedConfig: ...

    def parameters(self, recurse: bool = ...) -> Iterator[torch.nn.Parameter]: ...

    def __call__(
        self,
        *,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        use_cache: bool,
        logits_to_keep: int | torch.Tensor,
        **kv: KVCache,
    ) -> CausalLMOutput:
        """Logits of the last ``logits_to_keep`` positions (or of those a 1-D index tensor
        names); the cache (``_kv.cache_kwargs``:
        ``cache`` or ``past_key_values`` by transformers version) is extended in place."""
        ...


class DecoderOutput(Protocol):
    """The decoder's output: ``last_hidden_state`` ``[B, T, H]`` and, with ``use_cache``, the
    cache it filled."""

    @property
    def last_hidden_state(self) -> torch.Tensor: ...

    @property
    def past_key_values(self) -> KVCache:
        """The filled cache (``cache`` since transformers 5.2x: read it with
        ``_kv.output_cache``)."""
        ...


class Decoder(Protocol):
    """A causal LM's decoder stack without its LM head (``model.get_decoder()``)."""

    def __call__(
        self,
        *,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = ...,
        position_ids: torch.Tensor | None = ...,
        use_cache: bool,
        **kv: KVCache,
    ) -> DecoderOutput: ...


class DecoderLM(CausalLM, Protocol):
    """A causal LM whose decoder and LM head the trainer calls apart, so that the vocabulary
    projection runs only where a token trains (a ``PreTrainedModel``, peft's base model)."""

    def get_decoder(self) -> Decoder: ...

    def get_output_embeddings(self) -> torch.nn.Module: ...

    def get_input_embeddings(self) -> torch.nn.Embedding: ...


class Tokenizer(Protocol):
    """The decoding half of a tokenizer."""

    def decode(self, token_ids: list[int], /, skip_special_tokens: bool = ...) -> str | list[str]:
        """Text of ``token_ids`` (a ``str`` for a flat id list; transformers types it wider)."""
        ...


class ChatTokenizer(Tokenizer, Protocol):
    """A tokenizer with a chat template, as the engines render prompts and read replies with it."""

    @property
    def chat_template(self) -> str | dict[str, str] | None: ...

    @property
    def eos_token_id(self) -> int | None: ...

    @property
    def pad_token_id(self) -> int | None: ...

    @property
    def all_special_ids(self) -> list[int]: ...

    def apply_chat_template(
        self,
        conversation: list[dict[str, Any]],  # chat messages: JSON objects
        /,
        *,
        # JSON tool schemas; transformers' list[dict | Callable] is invariant, so a
        # list[dict[str, Any]] would not match it
        tools: list[Any] | None = ...,
        tokenize: bool = ...,
        add_generation_prompt: bool = ...,
    ) -> object:
        """The rendered conversation (a ``str`` with ``tokenize=False``; transformers types it
        wider)."""
        ...

    def __call__(
        self, text: str, /, *, add_special_tokens: bool = ...
    ) -> Mapping[str, Sequence[int]]:
        """``{"input_ids": [...], ...}`` for one text."""
        ...

    def parse_response(self, response: str, *, prefix: list[int]) -> dict[str, Any]:
        """The assistant message (a JSON object) its ``response_template`` reads from
        ``response``; called only when the tokenizer has one."""
        ...


def decode_text(tokenizer: Tokenizer, ids: list[int], *, skip_special_tokens: bool = False) -> str:
    """``tokenizer.decode(ids)``: one ``str`` for a flat id list (transformers types ``decode``
    for batches of lists too)."""
    return cast("str", tokenizer.decode(ids, skip_special_tokens=skip_special_tokens))
