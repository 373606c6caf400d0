"""Token logprobs through a frozen LM head in row chunks, never holding an ``[N, V]`` tensor.

With a big vocabulary (Qwen3: 151,936) every fp32 ``[N, V]`` tensor of a 4,096-token step is
2.5 GB, and the plain path (logits, their fp32 cast, ``log_softmax``, the entropy's product,
and autograd's saved copies) keeps several alive at once: measured on CPU at N=4096, H=1024,
V=151936, 8.8 GB above the inputs against 0.2 GB here, with equal results (max abs difference
1e-4 on the input gradient). The backward pass recomputes each chunk's logits instead of
saving them. For small ``N x V`` (the CPU quick start: 384 x 49152) the plain path is faster
and needs little memory, so :func:`chunked_applies` keeps it there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import torch

__all__ = ["CHUNK_ELEMENTS", "MIN_CHUNKED_ELEMENTS", "chunked_applies", "chunked_logprobs"]

CHUNK_ELEMENTS = 1 << 25
"""fp32 elements of one chunk's logits (128 MB): rows per chunk = this // vocabulary size."""

MIN_CHUNKED_ELEMENTS = 1 << 26
"""``N x V`` above which the head runs in chunks (below it one fp32 ``[N, V]`` is <= 256 MB)."""


def chunked_applies(rows: int, head: torch.nn.Module, *, softcap: float | None) -> bool:
    """Whether :func:`chunked_logprobs` can and should replace the plain head for ``rows``."""
    if not isinstance(head, torch.nn.Linear) or head.bias is not None or softcap:
        return False
    if head.weight.requires_grad:  # a trained head needs its weight gradient: plain path
        return False
    return rows * head.weight.shape[0] > MIN_CHUNKED_ELEMENTS


def chunked_logprobs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = True,
    rows_per_chunk: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logp [N], entropy [N])`` of ``targets`` under ``softmax(hidden @ weight.T / T)``.

    ``logp`` is differentiable in ``hidden``; ``entropy`` is not (the loss uses it detached),
    and is zeros without ``with_entropy`` (which saves a softmax per chunk).
    """
    rows = rows_per_chunk or max(1, CHUNK_ELEMENTS // weight.shape[0])
    hidden = hidden.to(weight.dtype)  # an autocast decoder may hand over another dtype
    apply = cast("Callable[..., tuple[torch.Tensor, torch.Tensor]]", _ChunkedHead.apply)
    return apply(
        hidden, weight, targets, float(temperature), with_entropy, rows
    )  # torch leaves it untyped


def _chunk_logits(hidden: torch.Tensor, weight: torch.Tensor, temperature: float) -> torch.Tensor:
    logits = (hidden @ weight.t()).float()  # [c, V]
    return logits.div_(temperature) if temperature != 1.0 else logits


class _ChunkedHead(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        targets: torch.Tensor,
        temperature: float,
        with_entropy: bool,
        rows: int,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        n = hidden.shape[0]
        logp = hidden.new_empty(n, dtype=torch.float32)
        entropy = hidden.new_zeros(n, dtype=torch.float32)
        lse = hidden.new_empty(n, dtype=torch.float32)
        for i in range(0, n, rows):
            logits = _chunk_logits(hidden[i : i + rows], weight, temperature)
            chunk_lse = torch.logsumexp(logits, dim=-1)  # [c]
            lse[i : i + rows] = chunk_lse
            picked = logits.gather(-1, targets[i : i + rows, None])[:, 0]
            logp[i : i + rows] = picked - chunk_lse
            if with_entropy:  # H = lse - sum(p * logits), with p = softmax(logits)
                probs = torch.softmax(logits, dim=-1)
                entropy[i : i + rows] = chunk_lse - (probs * logits).sum(-1)
        ctx.save_for_backward(hidden, weight, targets, lse)
        ctx.temperature = temperature
        ctx.rows = rows
        ctx.mark_non_differentiable(entropy)
        return logp, entropy

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        grad_logp = grads[0]
        hidden, weight, targets, lse = ctx.saved_tensors
        temperature: float = ctx.temperature
        rows: int = ctx.rows
        grad_hidden = torch.empty_like(hidden)
        for i in range(0, hidden.shape[0], rows):
            # d logp / d logits = onehot(target) - softmax, scaled by 1/T through the logits
            probs = _chunk_logits(hidden[i : i + rows], weight, temperature)
            probs.sub_(lse[i : i + rows, None]).exp_()
            g = grad_logp[i : i + rows].float()
            probs.mul_(-g[:, None]).scatter_add_(-1, targets[i : i + rows, None], g[:, None])
            if temperature != 1.0:
                probs.div_(temperature)
            grad_hidden[i : i + rows] = probs.to(hidden.dtype) @ weight
        return grad_hidden, None, None, None, None, None
