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
    logits: torch.Tensor, temperature: torch.Tensor, top_p: torch.Tensor
) -> torch.Tensor:
    """Log-probabilities of the sampling distribution.

    Args:
        logits: ``[B, V]`` float32 next-token logits.
        temperature: ``[B]``; 0 means greedy (scored at temperature 1).
        top_p: ``[B]`` nucleus mass in (0, 1].

    Returns:
        ``[B, V]`` logprobs; tokens outside the nucleus are ``-inf``.
    """
    import torch

    t = torch.where(temperature > 0, temperature, torch.ones_like(temperature))  # [B]
    scaled = logits / t[:, None]  # [B, V]
    if bool((top_p < 1.0).any()):
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
    """Draw one token per row.

    Rows with their own generator (a request ``seed``) draw from it alone, so a seeded request
    samples the same tokens whatever else is in the batch.

    Args:
        logprobs: ``[B, V]`` from :func:`processed_logprobs`.
        greedy: per row, take the argmax instead of sampling.
        generators: per row, a private generator or ``None``.
        shared: the generator for unseeded rows (``None``: torch's global one).

    Returns:
        ``[B]`` int64 token ids.
    """
    import torch

    probs = logprobs.exp()  # [B, V]
    out = logprobs.argmax(dim=-1)  # [B]
    unseeded = [
        i for i, (g, gr) in enumerate(zip(generators, greedy, strict=True)) if not gr and g is None
    ]
    if unseeded:
        idx = torch.tensor(unseeded, device=logprobs.device)
        out[idx] = torch.multinomial(probs[idx], 1, generator=shared).squeeze(1)
    for i, g in enumerate(generators):
        if g is not None and not greedy[i]:
            out[i] = torch.multinomial(probs[i : i + 1], 1, generator=g)[0, 0]
    return out
