"""A padded, KV-cached decoding loop over independent chat requests, with continuous batching."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast

from osmosis_ai.serving import FinishReason, GenerationResult
from osmosis_ai.serving.toolcalls import assistant_message
from osmosis_trainer._kv import cache_kwargs
from osmosis_trainer.engines._hf_turns import Turn, TurnCache, TurnKey, common_length
from osmosis_trainer.engines._response import ResponseParser, reply_text
from osmosis_trainer.engines._sampling import processed_logprobs, sample_tokens

if TYPE_CHECKING:
    import torch

    from osmosis_trainer._protocols import CausalLM, KVCache, Tokenizer

__all__ = ["PromptHead", "Row", "can_join", "generate_batch"]

P = TypeVar("P")
"""A row's payload: whatever the caller needs back with a finished row (the engine's job)."""


class Forward(Protocol):
    """One forward pass of a causal LM over new tokens, with its KV cache."""

    def new_cache(self) -> KVCache: ...

    def __call__(
        self, ids: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor, cache: KVCache
    ) -> torch.Tensor:
        """Logits ``[B, V]`` (float32) of the last position.

        Args:
            ids: ``[B, T]`` new token ids.
            mask: ``[B, L + T]`` 1 where the cache (then the new tokens) holds a real token.
            pos: ``[B, T]`` positions of the new tokens.
            cache: from :meth:`new_cache`, extended in place.
        """
        ...


class HFForward:
    """transformers' own forward with a ``DynamicCache``.

    (A lean forward of osmosis's own, plain torch ops over Llama-family weights, was measured on
    the embedded SmolLM2-135M: 1-2 % of decoding's and ~5 % of the update's CPU time, under the
    10 % a speed path must save to be kept; see BENCHMARKS.md, trainer_real.)
    """

    def __init__(self, model: CausalLM) -> None:
        self.model = model

    def new_cache(self) -> KVCache:
        from transformers import DynamicCache

        # transformers types a layer's keys/values as optional (unset before the first
        # forward); this loop reads them only after prefill has filled every layer.
        return cast("KVCache", DynamicCache(config=self.model.config))

    def __call__(
        self, ids: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor, cache: KVCache
    ) -> torch.Tensor:
        import torch

        # The last position as an index, not ``logits_to_keep=1``: transformers slices the
        # hidden states ``[:, -1:]`` for an int, a strided view that torch.matmul does not fold
        # into one mm with a frozen (no-grad) head; it runs a bmm over a copy of the head per
        # row instead (an 8-prompt prefill of SmolLM2-135M: 0.66 s against 0.26 s). Indexing
        # hands the head contiguous rows. Test: tests/trainer/engines/test_hf_batch.py.
        last = torch.tensor([ids.shape[1] - 1], device=ids.device)
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=pos,
            use_cache=True,
            logits_to_keep=last,
            **cache_kwargs(self.model, cache),
        )
        logits: torch.Tensor = out.logits[:, -1, :].float()
        return logits


@dataclass
class Row(Generic[P]):
    """One request's state during a batch."""

    payload: P
    prompt_ids: list[int]
    max_new: int
    temperature: float
    top_p: float
    seed: int | None
    stop: list[str]
    parse_tools: bool
    device: str = "cpu"
    out_ids: list[int] = field(default_factory=list)
    out_logprobs: list[float] = field(default_factory=list)
    finish: FinishReason | None = None
    generator: torch.Generator | None = None
    ended_by_eos: bool = False
    key: TurnKey | None = None
    """The conversation the call continues (rollout, sample), for the turn cache."""

    def __post_init__(self) -> None:
        if self.seed is not None:
            import torch

            self.generator = torch.Generator(self.device)
            self.generator.manual_seed(self.seed)

    def result(
        self, tokenizer: Tokenizer, model: str, version: int, parser: ResponseParser | None = None
    ) -> GenerationResult:
        eos_last = self.finish == "stop" and self.ended_by_eos
        text = reply_text(tokenizer, self.out_ids, ended_by_token=eos_last, stop=self.stop)
        if self.parse_tools and parser is not None:
            message, calls = parser(text, self.prompt_ids)
        else:
            message, calls = assistant_message(text, parse_tools=self.parse_tools)
        finish: FinishReason = self.finish or "length"
        if calls and finish == "stop":
            finish = "tool_calls"
        return GenerationResult(
            message=message,
            text=text,
            finish_reason=finish,
            tool_calls=calls,
            prompt_token_ids=self.prompt_ids,
            completion_token_ids=self.out_ids,
            logprobs=self.out_logprobs,
            model=model,
            policy_version=version,
            prompt_tokens=len(self.prompt_ids),
            completion_tokens=len(self.out_ids),
        )

    def push(self, token: int, logprob: float, eos_ids: set[int], tokenizer: Tokenizer) -> bool:
        """Append a sampled token; return True when the row is finished."""
        self.out_ids.append(token)
        self.out_logprobs.append(logprob)
        if token in eos_ids:
            self.finish, self.ended_by_eos = "stop", True
        elif self.stop and self._hit_stop(tokenizer):
            self.finish = "stop"
        elif len(self.out_ids) >= self.max_new:
            self.finish = "length"
        return self.finish is not None

    def _hit_stop(self, tokenizer: Tokenizer) -> bool:
        window = max(len(s) for s in self.stop) + 4  # tokens are at least one char (or a byte)
        tail = tokenizer.decode(self.out_ids[-window:], skip_special_tokens=False)
        return any(s in tail for s in self.stop)


@dataclass
class _Batch(Generic[P]):
    """The rows decoding together, their KV cache and the logits of their next token."""

    rows: list[Row[P]]
    cache: KVCache  # its layers hold keys/values [b, heads, L, head_dim]
    mask: torch.Tensor  # [b, L] 1 where the cache holds a real token (prompts are left-padded)
    next_pos: torch.Tensor  # [b, 1] position of each row's next token
    temps: torch.Tensor  # [b]
    top_p: torch.Tensor  # [b]
    logits: torch.Tensor  # [b, V] float32, for the token to sample now


HEAD_MIN_TOKENS = 16
"""A shared prompt head shorter than this is not worth a forward pass of its own."""


@dataclass
class PromptHead:
    """The keys/values of the prompt head most requests share (an agent's system prompt and
    tools block), computed once and reused by later prefills of the same weights.

    transformers' prompt-cache reuse (a ``DynamicCache`` filled by one prefix, copied into
    each request's) applied per request: every policy call of an agent repeats the same head
    (~230 of ~350 prompt tokens in the quick start), and prefill is most of a short tool call's
    cost. The head is the longest common prefix of the first prefill with two distinct prompts;
    a later prompt uses as much of it as it shares. Owners must :meth:`clear` it whenever the
    weights change (an adapter load).
    """

    ids: tuple[int, ...] = ()
    kv: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)  # [1, h, L, d]
    last: tuple[int, ...] = ()
    """A prompt seen before the head was set: one request at a time learns it too."""

    def clear(self) -> None:
        self.ids, self.kv, self.last = (), [], ()

    def shared(
        self, prompts: Sequence[Sequence[int]], forward: Forward, device: torch.device
    ) -> int:
        """How many head tokens all ``prompts`` can take from the cache (0: none), learning
        the head from them first when it is unset. Each prompt keeps one token to prefill."""
        if not self.ids:
            # Distinct prompts of this prefill, or a lone one and the one before it.
            pool = list(prompts) if len(prompts) > 1 else [prompts[0], self.last]
            n = min(common_length(pool[0], p) for p in pool[1:])
            n = min(n, *(len(p) - 1 for p in prompts))
            if n >= HEAD_MIN_TOKENS:
                self._learn(prompts[0][:n], forward, device)
            self.last = tuple(prompts[0])
        if not self.ids:
            return 0
        n = min(min(common_length(self.ids, p), len(p) - 1) for p in prompts)
        return n if n >= HEAD_MIN_TOKENS else 0

    def _learn(self, ids: Sequence[int], forward: Forward, device: torch.device) -> None:
        import torch

        cache = forward.new_cache()
        if not can_join(cache):
            return  # sliding-window layers drop old keys: no head to keep
        row = torch.tensor([list(ids)], dtype=torch.long, device=device)
        forward(row, torch.ones_like(row), torch.arange(len(ids), device=device)[None], cache)
        self.ids = tuple(ids)
        self.kv = [(layer.keys, layer.values) for layer in cache.layers]

    def fill(self, cache: KVCache, n: int, rows: int) -> None:
        """Put the head's first ``n`` tokens into an empty ``cache``, once per row."""
        for layer, (keys, values) in zip(cache.layers, self.kv, strict=True):
            layer.update(
                keys[..., :n, :].expand(rows, -1, -1, -1),
                values[..., :n, :].expand(rows, -1, -1, -1),
            )


def _prefill(
    forward: Forward,
    rows: list[Row[P]],
    pad_id: int,
    device: torch.device,
    head: PromptHead | None = None,
    turns: TurnCache | None = None,
) -> _Batch[P]:
    """Run the left-padded prompts of ``rows`` through the model in one forward pass.

    Identical prompts run once and their KV cache is copied to each row: the samples of a GRPO
    group arrive together with the same prompt, so prefill work drops by the group size. A row
    whose conversation ``turns`` kept starts from that turn's cache; the others take the tokens
    they share with ``head`` from its cache. Only the rest of each prompt runs (the cache then
    reads ``[padding | cached ids | padding | rest of the prompt]``, the mask skipping padding).
    """
    import torch

    slot: dict[tuple[int, ...], int] = {}
    which = [slot.setdefault(tuple(r.prompt_ids), len(slot)) for r in rows]  # row -> prompt
    prompts = list(slot)
    kept = _kept_turns(rows, which, prompts, turns)  # per prompt: (ids reused, turn) | None
    fresh = [p for p, k in zip(prompts, kept, strict=True) if k is None]
    in_head = head.shared(fresh, forward, device) if head is not None and fresh else 0
    cached = [k[0] if k is not None else in_head for k in kept]  # per prompt
    span = max(cached)
    width = max(len(p) - c for p, c in zip(prompts, cached, strict=True))
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)  # [U, T]
    mask = torch.zeros((len(prompts), span + width), dtype=torch.long)  # [U, L]
    for i, (prompt, c) in enumerate(zip(prompts, cached, strict=True)):
        rest = prompt[c:]
        ids[i, width - len(rest) :] = torch.tensor(rest)
        mask[i, span - c : span] = 1
        mask[i, span + width - len(rest) :] = 1
    ids, mask = ids.to(device), mask.to(device)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)[:, span:]  # [U, T] positions skipping padding
    cache = forward.new_cache()
    if span and all(k is None for k in kept):
        assert head is not None
        head.fill(cache, span, len(prompts))
    elif span:
        sources = [k[1].kv if k is not None else head.kv if head else [] for k in kept]
        _fill_rows(cache, sources, cached, span)
    logits = forward(ids, mask, pos, cache)  # [U, V]
    if len(prompts) < len(rows):
        rows_of = torch.tensor(which, dtype=torch.long, device=device)  # [B]
        cache.batch_select_indices(rows_of)
        logits, mask, pos = logits[rows_of], mask[rows_of], pos[rows_of]
    return _Batch(
        rows=list(rows),
        cache=cache,
        mask=mask,
        next_pos=pos[:, -1:] + 1,
        temps=torch.tensor([r.temperature for r in rows], dtype=torch.float32, device=device),
        top_p=torch.tensor([r.top_p for r in rows], dtype=torch.float32, device=device),
        logits=logits,
    )


def _kept_turns(
    rows: Sequence[Row[P]],
    which: Sequence[int],
    prompts: Sequence[tuple[int, ...]],
    turns: TurnCache | None,
) -> list[tuple[int, Turn] | None]:
    """Per distinct prompt, the kept turn it continues and how many of its ids that covers."""
    kept: list[tuple[int, Turn] | None] = [None] * len(prompts)
    if turns is None:
        return kept
    for row, i in zip(rows, which, strict=True):
        if row.key is not None and kept[i] is None:
            kept[i] = turns.take(row.key, prompts[i])
    return kept


def _fill_rows(
    cache: KVCache,
    sources: Sequence[Sequence[tuple[torch.Tensor, torch.Tensor]]],
    lengths: Sequence[int],
    span: int,
) -> None:
    """Put each row's first ``lengths[i]`` cached keys/values (``sources[i]``: per layer,
    ``[1, heads, L, head_dim]``) into an empty ``cache``, right-aligned in ``span`` columns."""
    for layer_i, layer in enumerate(cache.layers):
        ref_k, ref_v = next(src[layer_i] for src, n in zip(sources, lengths, strict=True) if n)
        keys = ref_k.new_zeros((len(lengths), ref_k.shape[1], span, ref_k.shape[3]))
        values = ref_v.new_zeros((len(lengths), ref_v.shape[1], span, ref_v.shape[3]))
        for i, (src, n) in enumerate(zip(sources, lengths, strict=True)):
            if n:
                keys[i, :, span - n :] = src[layer_i][0][0, :, :n]
                values[i, :, span - n :] = src[layer_i][1][0, :, :n]
        layer.update(keys, values)


def _keep_turns(batch: _Batch[P], done: Sequence[bool], turns: TurnCache) -> None:
    """Keep the cache of each finished row that belongs to a conversation, for its next call:
    its columns the mask marks real (the prompt, then every sampled token fed back)."""
    layers = batch.cache.layers
    for j, (row, finished) in enumerate(zip(batch.rows, done, strict=True)):
        if not finished or row.key is None:
            continue
        cols = batch.mask[j].nonzero()[:, 0]
        ids = (*row.prompt_ids, *row.out_ids[:-1])
        if len(cols) != len(ids):  # never expected: keep nothing rather than a wrong cache
            continue
        kv = [
            (x.keys[j : j + 1].index_select(2, cols), x.values[j : j + 1].index_select(2, cols))
            for x in layers
        ]
        turns.keep(row.key, Turn(ids, kv))


def _step(
    batch: _Batch[P],
    eos: set[int],
    shared_generator: torch.Generator | None,
    tokenizer: Tokenizer,
    on_done: Callable[[Row[P]], None] | None,
    turns: TurnCache | None = None,
) -> torch.Tensor:
    """Sample and record every row's next token, hand finished rows to ``on_done`` (after
    ``turns`` keeps their cache: a caller's next call may arrive at once) and drop them from
    ``batch``; returns the tokens [b'] to feed for the rows still decoding."""
    nucleus = any(r.top_p < 1.0 for r in batch.rows)
    logprobs = processed_logprobs(batch.logits, batch.temps, batch.top_p, nucleus=nucleus)
    tokens = sample_tokens(
        logprobs,
        [r.temperature == 0 for r in batch.rows],
        [r.generator for r in batch.rows],
        shared_generator,
    )  # [b]
    token_lp = logprobs.gather(1, tokens[:, None])[:, 0].tolist()
    done = [
        r.push(int(t), float(lp), eos, tokenizer)
        for r, t, lp in zip(batch.rows, tokens.tolist(), token_lp, strict=True)
    ]
    if turns is not None and any(done):
        _keep_turns(batch, done, turns)
    if on_done is not None:
        for row, finished in zip(batch.rows, done, strict=True):
            if finished:
                on_done(row)
    return _keep(batch, tokens, done)


def _keep(batch: _Batch[P], tokens: torch.Tensor, done: list[bool]) -> torch.Tensor:
    """Drop finished rows from ``batch`` (in place); returns the kept rows' tokens.

    Cache columns that only padding of dropped rows needed are cut as well, so a long prompt
    that finished stops costing attention for everyone else.
    """
    import torch

    if all(done):
        batch.rows = []
        return tokens[:0]
    if any(done):
        kept = [j for j, d in enumerate(done) if not d]
        keep = torch.tensor(kept, dtype=torch.long, device=tokens.device)
        batch.cache.batch_select_indices(keep)
        batch.mask, batch.next_pos = batch.mask[keep], batch.next_pos[keep]
        batch.temps, batch.top_p = batch.temps[keep], batch.top_p[keep]
        batch.rows = [r for r, d in zip(batch.rows, done, strict=True) if not d]
        tokens = tokens[keep]
        if batch.rows:
            first = int(batch.mask.any(dim=0).int().argmax())  # first column anyone attends to
            if first > 0 and cache_rewrite_holds():
                batch.mask = batch.mask[:, first:]
                layers = batch.cache.layers
                set_kv(layers, [(x.keys[..., first:, :], x.values[..., first:, :]) for x in layers])
    return tokens


def set_kv(layers: Sequence[Any], kv: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Replace each cache layer's key and value tensors (the one place that writes them).

    transformers' ``DynamicLayer`` keeps a layer's cache in its ``keys``/``values`` tensors and
    offers no call to cut columns or to stack two batches' caches, which continuous batching
    needs; its ``update`` concatenates onto whatever these attributes hold. That is internal to
    transformers, so :func:`cache_rewrite_holds` checks it on the installed version first.
    """
    for layer, (keys, values) in zip(layers, kv, strict=True):
        layer.keys, layer.values = keys, values


@functools.cache
def cache_rewrite_holds() -> bool:
    """Whether the installed transformers' ``DynamicLayer`` still works the way :func:`set_kv`
    relies on: attention reads ``keys``/``values`` as they are and ``update`` extends them.

    Probed once per process on small tensors, instead of pinning transformers minors: where a
    release changes the layer, the engine stops rewriting caches (no mid-decode joins, no column
    trimming) and stays correct, only slower.
    """
    import torch
    from transformers.cache_utils import DynamicLayer

    try:
        layer = cast(Any, DynamicLayer)()  # untyped in transformers
        first = torch.arange(24.0).reshape(1, 1, 6, 4)
        layer.update(first, -first)
        cut = first[..., 2:, :]
        set_kv([layer], [(cut, -cut)])
        step = torch.full((1, 1, 1, 4), 100.0)
        keys, values = layer.update(step, -step)
        want = torch.cat([cut, step], dim=-2)
        return (
            torch.equal(keys, want)
            and torch.equal(values, -want)
            and keys is layer.keys
            and values is layer.values
            and layer.get_seq_length() == 5
        )
    except Exception:  # any change in the layer's shape or API means: do not rewrite it
        return False


def can_join(cache: KVCache) -> bool:
    """Whether rows can join this cache mid-decode (plain full-attention layers only)."""
    from transformers.cache_utils import DynamicLayer

    layers: Sequence[object] = cache.layers  # checked by exact class, not by the protocol
    return all(type(layer) is DynamicLayer for layer in layers) and cache_rewrite_holds()


def _left_pad(t: torch.Tensor, width: int, dim: int) -> torch.Tensor:
    import torch.nn.functional as F

    missing = width - t.shape[dim]
    if missing == 0:
        return t
    pad = [0, 0] * (t.dim() - 1 - (dim % t.dim())) + [missing, 0]
    return F.pad(t, pad)


def _join(batch: _Batch[P], new: _Batch[P]) -> None:
    """Append ``new``'s rows to ``batch`` (in place), left-padding the shorter cache."""
    import torch

    width = max(batch.mask.shape[1], new.mask.shape[1])
    batch.mask = torch.cat([_left_pad(batch.mask, width, 1), _left_pad(new.mask, width, 1)])
    pairs = list(zip(batch.cache.layers, new.cache.layers, strict=True))
    set_kv(
        batch.cache.layers,
        [
            (
                torch.cat([_left_pad(a.keys, width, -2), _left_pad(b.keys, width, -2)]),
                torch.cat([_left_pad(a.values, width, -2), _left_pad(b.values, width, -2)]),
            )
            for a, b in pairs
        ],
    )
    batch.next_pos = torch.cat([batch.next_pos, new.next_pos])
    batch.temps = torch.cat([batch.temps, new.temps])
    batch.top_p = torch.cat([batch.top_p, new.top_p])
    batch.rows += new.rows


def generate_batch(
    model: CausalLM,
    rows: list[Row[P]],
    *,
    pad_id: int,
    eos_ids: list[int],
    shared_generator: torch.Generator | None,
    tokenizer: Tokenizer,
    admit: Callable[[int], list[Row[P]]] | None = None,
    on_done: Callable[[Row[P]], None] | None = None,
    head: PromptHead | None = None,
    turns: TurnCache | None = None,
) -> None:
    """Decode ``rows`` together; each row ends on EOS, a stop string or its budget.

    Continuous batching: between two decoding steps ``admit(n_active)`` may hand over newly
    arrived rows; they are prefilled and join the running batch (the shorter KV cache is
    left-padded). ``on_done(row)`` is called as soon as a row finishes, so a short reply never
    waits for the longest one. Finished rows leave the batch. ``head``: a
    :class:`PromptHead` of the served weights, shared by the prefills; ``turns``: the
    conversations' last turns (``_hf_turns``), kept and reused by rows with a ``key``.
    """
    import torch

    device = next(model.parameters()).device
    eos = set(eos_ids)
    forward: Forward = HFForward(model)
    turns = turns if turns is not None and can_join(forward.new_cache()) else None
    batch = _prefill(forward, rows, pad_id, device, head, turns)
    joinable = admit is not None and can_join(batch.cache)
    while True:
        tokens = _step(batch, eos, shared_generator, tokenizer, on_done, turns)
        if joinable and admit is not None and batch.rows:
            arrived = admit(len(batch.rows))
            if arrived:
                new = _prefill(forward, arrived, pad_id, device, head, turns)
                new_tokens = _step(new, eos, shared_generator, tokenizer, on_done, turns)
                if new.rows:
                    _join(batch, new)
                    tokens = torch.cat([tokens, new_tokens])
        if not batch.rows:
            return
        batch.mask = torch.cat([batch.mask, batch.mask.new_ones((batch.mask.shape[0], 1))], 1)
        batch.logits = forward(tokens[:, None], batch.mask, batch.next_pos, batch.cache)
        batch.next_pos = batch.next_pos + 1
