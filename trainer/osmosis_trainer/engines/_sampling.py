"""The sampling distribution and its logprobs (pure tensor functions).

Logprobs are *processed*: the log-softmax of the distribution actually sampled from, i.e. the
logits divided by the temperature, with tokens outside the top-p nucleus removed (vLLM's
``--logprobs-mode processed_logprobs``). For temperature 1 and top_p 1 they equal the model's raw
logprobs. Greedy decoding (temperature 0) takes the argmax and reports its logprob under the
temperature-1 distribution (with top_p applied), since the greedy distribution is degenerate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["processed_logprobs", "sample_tokens"]


def processed_logprobs(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_p: torch.Tensor,
    *,
    nucleus: bool | None = None,
) -> torch.Tensor:
    """Log-probabilities of the sampling distribution.

    Args:
        logits: ``[B, V]`` float32 next-token logits.
        temperature: ``[B]``; 0 means greedy (scored at temperature 1).
        top_p: ``[B]`` nucleus mass in (0, 1].
        nucleus: whether any ``top_p`` is below 1, when the caller knows (saves a device sync).

    Returns:
        ``[B, V]`` logprobs; tokens outside the nucleus are ``-inf``.
    """
    import torch

    t = torch.where(temperature > 0, temperature, torch.ones_like(temperature))  # [B]
    scaled = logits / t[:, None]  # [B, V]
    if nucleus if nucleus is not None else bool((top_p < 1.0).any()):
        sorted_logits, order = scaled.sort(dim=-1, descending=True)  # [B, V]
        probs = sorted_logits.softmax(dim=-1)
        mass_before = probs.cumsum(dim=-1) - probs  # [B, V] mass of strictly better tokens
        drop_sorted = mass_before >= top_p[:, None]  # keep until the nucleus reaches top_p
        drop_sorted[:, 0] = False  # the best token always stays
        drop = torch.zeros_like(drop_sorted).scatter(1, order, drop_sorted)
        scaled = scaled.masked_fill(drop, float("-inf"))
    return scaled.log_softmax(dim=-1)


def sample_tokens(
    logprobs: torch.Tensor,
    greedy: list[bool],
    generators: list[torch.Generator | None],
    shared: torch.Generator | None,
) -> torch.Tensor:
    """Draw one token per row, by inverse-CDF sampling.

    One uniform number per row is placed on the row's cumulative distribution. That is exact
    sampling, and it draws one random number per row where ``torch.multinomial`` draws one per
    vocabulary entry (380 µs against 30 µs for 32 rows of 380 tokens on one CPU core, a
    large part of a small model's decoding step). Tokens of probability zero (outside the
    nucleus) have empty intervals and are never drawn. Rows with their own generator (a request
    ``seed``) draw from it alone, so a seeded request samples the same tokens whatever else is
    in the batch.

    Args:
        logprobs: ``[B, V]`` from :func:`processed_logprobs`.
        greedy: per row, take the argmax instead of sampling.
        generators: per row, a private generator or ``None``.
        shared: the generator for unseeded rows (``None``: torch's global one).

    Returns:
        ``[B]`` int64 token ids.
    """
    import torch

    b, v = logprobs.shape
    cdf = logprobs.exp().cumsum(dim=-1)  # [B, V]
    u = torch.rand((b, 1), generator=shared, device=logprobs.device)  # [B, 1]
    for i, g in enumerate(generators):
        if g is not None:
            u[i, 0] = torch.rand((), generator=g, device=logprobs.device)
    u = u * cdf[:, -1:]  # the total, not 1: float rounding must not push u past the end
    out = torch.searchsorted(cdf, u, right=True).squeeze(1).clamp_(max=v - 1)  # [B]
    if any(greedy):
        pick = torch.tensor(greedy, device=logprobs.device)
        out = torch.where(pick, logprobs.argmax(dim=-1), out)
    return out
