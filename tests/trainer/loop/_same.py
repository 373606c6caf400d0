"""One check for every faster forward path: its logprobs and LoRA gradients equal the plain's."""

from __future__ import annotations

import torch

from osmosis_trainer.loop._policy import lora_parameters


def assert_same_as_plain(
    model: torch.nn.Module,
    fast: tuple[torch.Tensor, torch.Tensor],
    plain: tuple[torch.Tensor, torch.Tensor],
) -> None:
    """``fast`` and ``plain`` are ``(logprobs, mask)`` of the same sequences in the same order,
    each still attached to its graph; float rounding is all they may differ by."""
    torch.testing.assert_close(fast[0][fast[1]], plain[0][plain[1]], rtol=1e-4, atol=1e-5)
    grads = []
    for lp, _ in (fast, plain):
        model.zero_grad()
        lp.sum().backward(retain_graph=True)
        grads.append({n: p.grad.clone() for n, p in lora_parameters(model) if p.grad is not None})
    for name, grad in grads[1].items():
        torch.testing.assert_close(grads[0][name], grad, rtol=1e-3, atol=1e-5)
