"""Loss masks: which token positions train.

A training sequence carries ``loss_mask[t] = 1`` for tokens the policy generated (assistant
completions) and 0 for prompt, tool-result and environment tokens. Logits at position ``t``
predict token ``t + 1``, so everything the loss sees is shifted by one.
"""

from __future__ import annotations

import torch

from osmosis_ai.errors import TrainingError

__all__ = ["combine_masks", "drop_truncated", "require_nonempty", "shift_mask", "truncate_at_eos"]


def shift_mask(loss_mask: torch.Tensor) -> torch.Tensor:
    """``[B, T] -> [B, T-1]``: the mask of predicted tokens, aligned with logits ``[:, :-1]``."""
    return loss_mask[:, 1:]


def combine_masks(*masks: torch.Tensor) -> torch.Tensor:
    """Element-wise AND of same-shape masks (e.g. the completion mask and a tool mask)."""
    if not masks:
        raise ValueError("combine_masks needs at least one mask")
    out = masks[0].to(torch.bool)
    for m in masks[1:]:
        if m.shape != out.shape:
            raise ValueError(f"mask shapes differ: {tuple(out.shape)} vs {tuple(m.shape)}")
        out = out & m.to(torch.bool)
    return out


def truncate_at_eos(token_ids: torch.Tensor, mask: torch.Tensor, eos_ids: list[int]) -> torch.Tensor:
    """Zero the mask after the first masked EOS token of each row (the EOS itself is kept).

    Args:
        token_ids: ``[B, T]`` token ids.
        mask: ``[B, T]`` completion mask.
        eos_ids: token ids that end a completion.

    Returns:
        ``[B, T]`` bool mask.
    """
    m = mask.to(torch.bool)
    is_eos = torch.isin(token_ids, torch.tensor(eos_ids, device=token_ids.device)) & m  # [B, T]
    # Number of EOS strictly before t; positions after the first EOS have a count ≥ 1.
    before = torch.cumsum(is_eos.int(), dim=-1) - is_eos.int()  # [B, T]
    return m & (before == 0)


def drop_truncated(mask: torch.Tensor, truncated: torch.Tensor) -> torch.Tensor:
    """Zero whole rows whose completion hit the length limit (``mask_truncated_completions``).

    Args:
        mask: ``[B, T]`` mask.
        truncated: ``[B]`` bool, True where the sequence was cut by ``max_tokens``.
    """
    return mask.to(torch.bool) & ~truncated.to(torch.bool).unsqueeze(-1)


def require_nonempty(mask: torch.Tensor, where: str) -> None:
    """Raise :class:`TrainingError` if ``mask`` selects no token at all.

    An all-zero mask would make the update a silent no-op; it usually means the trajectories
    hold no policy-generated tokens (a workflow that never called the policy, or a loss mask
    that marked everything as prompt).
    """
    if not bool(mask.to(torch.bool).any()):
        raise TrainingError(
            f"{where}: the loss mask selects no token, so this update would train nothing. "
            "Check that the rollouts call the policy (ctx.chat or an Osmosis agent) and that "
            "their completions are not all truncated or masked as tool output."
        )
