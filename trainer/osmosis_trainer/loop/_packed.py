"""Short GRPO groups packed end to end in rows: no padding, one forward, a block mask.

A group's completions differ in length, so padding each continuation to its group's longest
(and sending the sequences that do not fit a chunk through a plain forward that repeats the
prompt) wastes compute: on trainer_real's batches (8 prompts of 38 tokens, 4 completions of
8-64 tokens each) the shared-prefix path ran 2375 padded tokens for 1774 distinct ones. Here a
micro-batch is ``R`` rows of at most ``row_cap`` tokens; a row holds whole chunks laid end to
end, each a shared prefix once and then its members' continuations, and a ``[R, 1, L, L]``
mask lets a token see only its own sequence's earlier tokens and its chunk's prefix. Positions
restart with every sequence, so each hidden state equals the plain forward's up to float
rounding (``tests/trainer/loop/test_packed.py``).

Attention over a packed row costs ``L²`` pairs whatever the mask (torch's CPU flash kernel
computes masked blocks too), against ``B × S × (P + S)`` for the cached-prefix path; hence the
row cap (:data:`PACK_ROW_TOKENS`). Longer groups keep the cached-prefix path (``_prefix``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from osmosis_trainer.loop._batch import MicroBatch, PackedRows, PrefixUnit, TrainSequence

if TYPE_CHECKING:
    from osmosis_trainer._protocols import Decoder

__all__ = ["PACK_ROW_TOKENS", "chunk_tokens", "layout", "pack_chunks", "packed_hidden"]

PACK_ROW_TOKENS = 256
"""Longest packed row. Measured on SmolLM2-135M (fp32, 2 cores; forward and backward with a
LoRA adapter, against the cached-prefix path on the same sequences; script in the commit
log): 8 groups of a 38-token prompt and four 8-64-token completions took 0.70x the time in
rows of up to 256 tokens and 0.85x in rows of up to 512; groups of a 150-token prompt and
four completions of up to 100 tokens, in rows of up to 1024, 0.97x; a 400-token prompt and
completions of up to 200 (rows of ~1000 tokens), 1.33x. A group longer than a row is split
into chunks that each repeat its prompt, so short prompts with long completions still pack."""


def _cont(seqs: Sequence[TrainSequence], unit: PrefixUnit, i: int) -> int:
    return len(seqs[i].token_ids) - unit.prefix_len


def _chunks(seqs: Sequence[TrainSequence], unit: PrefixUnit, row_cap: int) -> list[PrefixUnit]:
    """``unit`` split into chunks of at most ``row_cap`` tokens, each repeating the prefix."""
    members = sorted(unit.members, key=lambda i: (-_cont(seqs, unit, i), i))
    chunks: list[PrefixUnit] = []
    chunk: list[int] = []
    size = unit.prefix_len
    for i in members:
        if chunk and size + _cont(seqs, unit, i) > row_cap:
            chunks.append(PrefixUnit(tuple(chunk), unit.prefix_len))
            chunk, size = [], unit.prefix_len
        chunk.append(i)
        size += _cont(seqs, unit, i)
    chunks.append(PrefixUnit(tuple(chunk), unit.prefix_len))
    return chunks


def chunk_tokens(seqs: Sequence[TrainSequence], chunk: PrefixUnit) -> int:
    """Tokens a chunk fills in a packed row: its prefix once, then every continuation."""
    return chunk.prefix_len + sum(_cont(seqs, chunk, i) for i in chunk.members)


def pack_chunks(
    seqs: Sequence[TrainSequence], units: Sequence[PrefixUnit], row_cap: int
) -> tuple[list[list[PrefixUnit]], list[PrefixUnit]]:
    """Pack ``units`` into rows of at most ``row_cap`` tokens (first fit, longest first).

    A unit whose prefix and longest continuation exceed ``row_cap`` is not packed.

    Returns:
        ``(rows, left)``: the rows as lists of chunks, and the units left out.
    """
    chunks: list[PrefixUnit] = []
    left: list[PrefixUnit] = []
    for u in units:
        if u.prefix_len + max(_cont(seqs, u, i) for i in u.members) > row_cap:
            left.append(u)
        else:
            chunks.extend(_chunks(seqs, u, row_cap))
    chunks.sort(key=lambda c: (-chunk_tokens(seqs, c), c.members))
    rows: list[list[PrefixUnit]] = []
    room: list[int] = []
    for c in chunks:
        need = chunk_tokens(seqs, c)
        r = next((r for r, free in enumerate(room) if free >= need), None)
        if r is None:
            rows.append([])
            room.append(row_cap)
            r = len(rows) - 1
        rows[r].append(c)
        room[r] -= need
    return rows, left


def layout(
    seqs: Sequence[TrainSequence],
    rows: Sequence[Sequence[PrefixUnit]],
    mb: MicroBatch,
    *,
    pad_id: int,
    device: torch.device | str = "cpu",
) -> PackedRows:
    """The packed tensors of ``rows``, whose members are ``mb``'s rows in order."""
    r_n, b_n, s_n = len(rows), mb.input_ids.shape[0], mb.input_ids.shape[1]
    width = max(sum(chunk_tokens(seqs, c) for c in row) for row in rows)
    ids = torch.full((r_n, width), pad_id, dtype=torch.long)  # [R, L]
    pos = torch.zeros((r_n, width), dtype=torch.long)  # [R, L]
    seg = -torch.arange(1, width + 1).repeat(r_n, 1)  # [R, L] a pad token is its own segment
    owner = torch.full((r_n, width), -1, dtype=torch.long)  # [R, L] chunk of each token
    is_prefix = torch.zeros((r_n, width), dtype=torch.bool)  # [R, L]
    gather = torch.zeros((b_n, s_n), dtype=torch.long)  # [B, S]
    b = k = n_seg = 0
    for r, row in enumerate(rows):
        t = 0
        for chunk in row:
            p = chunk.prefix_len
            ids[r, t : t + p] = torch.tensor(seqs[chunk.members[0]].token_ids[:p])
            pos[r, t : t + p] = torch.arange(p)
            seg[r, t : t + p], owner[r, t : t + p], is_prefix[r, t : t + p] = n_seg, k, True
            last, t, n_seg = r * width + t + p - 1, t + p, n_seg + 1
            for i in chunk.members:
                m = len(seqs[i].token_ids) - p
                ids[r, t : t + m] = torch.tensor(seqs[i].token_ids[p:], dtype=torch.long)
                pos[r, t : t + m] = torch.arange(p, p + m)
                seg[r, t : t + m], owner[r, t : t + m] = n_seg, k
                if m:
                    gather[b, 0] = last
                    gather[b, 1:m] = r * width + t + torch.arange(m - 1)
                t, b, n_seg = t + m, b + 1, n_seg + 1
            k += 1
    causal = torch.ones((width, width), dtype=torch.bool).tril()  # [L, L]
    same_seg = seg.unsqueeze(2) == seg.unsqueeze(1)  # [R, L, L]
    own_prefix = is_prefix.unsqueeze(1) & (owner.unsqueeze(2) == owner.unsqueeze(1))  # [R, L, L]
    allowed = (causal & (same_seg | own_prefix)).unsqueeze(1)  # [R, 1, L, L]
    return PackedRows(
        ids=ids.to(device),
        positions=pos.to(device),
        allowed=allowed.to(device),
        gather=gather.to(device),
    )


def packed_hidden(decoder: Decoder, packed: PackedRows, dtype: torch.dtype) -> torch.Tensor:
    """Hidden states predicting each continuation token, ``[B, S, H]`` (as ``_prefix``'s).

    The mask goes in as an additive ``dtype`` bias (0 or the dtype's lowest): SDPA takes it
    as it is, and so does the eager attention, which would add a boolean mask as 0/1.
    """
    bias = torch.zeros(packed.allowed.shape, dtype=dtype, device=packed.allowed.device)
    bias = bias.masked_fill(~packed.allowed, torch.finfo(dtype).min)  # [R, 1, L, L]
    hidden = decoder(
        input_ids=packed.ids, attention_mask=bias, position_ids=packed.positions, use_cache=False
    ).last_hidden_state  # [R, L, H]
    flat = hidden.reshape(-1, hidden.shape[-1])  # [R * L, H]
    # index_select, not advanced indexing: the prefix's last state feeds every member, and
    # the backward of ``flat[gather]`` accumulates those duplicates in a thread-dependent
    # order on CPU (gradients differed run to run); index_select's backward (index_add) did not.
    picked = flat.index_select(0, packed.gather.reshape(-1))  # [B * S, H]
    return picked.reshape(*packed.gather.shape, flat.shape[-1])  # [B, S, H]
