"""Loss masks: which token positions train.

A training sequence carries ``loss_mask[t] = 1`` for tokens the policy generated (assistant
completions, each up to and including its EOS) and 0 for prompt, tool-result, environment and
template tokens; the trajectory builder (:mod:`osmosis_trainer.trajectory`) sets it from the
recorded calls. Logits at position ``t`` predict token ``t + 1``, so everything the loss sees is
shifted by one. Samples cut by the length limit are dropped whole before this point
(``[algorithm] mask_truncated_completions``).
"""

from __future__ import annotations

import torch

from osmosis_ai.errors import TrainingError

__all__ = ["require_nonempty", "shift_mask"]


def shift_mask(loss_mask: torch.Tensor) -> torch.Tensor:
    """``[B, T] -> [B, T-1]``: the mask of predicted tokens, aligned with logits ``[:, :-1]``."""
    return loss_mask[:, 1:]


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
