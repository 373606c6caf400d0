from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from osmosis_trainer.loop import _head, _policy
from osmosis_trainer.loop._head import chunked_applies, chunked_logprobs
from osmosis_trainer.loop._policy import attach_lora, token_logprobs
from osmosis_trainer.models import load_model


def _plain(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    logp_all = torch.log_softmax((hidden @ weight.t()).float() / temperature, dim=-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp_all.gather(-1, targets[:, None])[:, 0], entropy


@pytest.mark.parametrize(("temperature", "rows"), [(1.0, 3), (0.7, 4), (1.3, 64)])
def test_chunks_give_the_plain_head_s_logprobs_entropy_and_gradient(
    temperature: float, rows: int
) -> None:
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(50, 16, generator=gen) * 0.5
    hidden0 = torch.randn(11, 16, generator=gen)
    targets = torch.randint(0, 50, (11,), generator=gen)
    upstream = torch.linspace(-1.0, 1.0, 11)

    want_h = hidden0.clone().requires_grad_()
    want_lp, want_ent = _plain(want_h, weight, targets, temperature)
    (want_lp * upstream).sum().backward()

    got_h = hidden0.clone().requires_grad_()
    got_lp, got_ent = chunked_logprobs(
        got_h, weight, targets, temperature=temperature, rows_per_chunk=rows
    )
    (got_lp * upstream).sum().backward()

    torch.testing.assert_close(got_lp, want_lp.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got_ent, want_ent.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got_h.grad, want_h.grad, rtol=1e-5, atol=1e-5)
    assert not got_ent.requires_grad


def test_the_chunked_head_is_kept_for_big_frozen_bias_free_heads_only() -> None:
    head = torch.nn.Linear(8, 1000, bias=False).requires_grad_(False)
    big = _head.MIN_CHUNKED_ELEMENTS // 1000 + 1
    assert chunked_applies(big, head, softcap=None)
    assert not chunked_applies(big - 2, head, softcap=None)  # small N x V: plain is faster
    assert not chunked_applies(big, head, softcap=30.0)  # tanh cap: plain path
    assert not chunked_applies(big, head.requires_grad_(True), softcap=None)  # trained head
    biased = torch.nn.Linear(8, 1000).requires_grad_(False)
    assert not chunked_applies(big, biased, softcap=None)


def test_token_logprobs_through_chunks_match_the_plain_path(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lm = load_model(str(tiny_model_dir))
    model = attach_lora(lm.model, r=4, alpha=8, dropout=0.0, target_modules="all-linear", seed=0)
    ids = torch.tensor([[5, 9, 30, 41, 7, 8], [3, 4, 5, 6, 1, 1]])
    mask = torch.tensor([[0, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=torch.bool)

    def run() -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        model.zero_grad()
        lp, ent = token_logprobs(model, ids, mask, temperature=0.7, with_entropy=True)
        assert ent is not None
        (lp * torch.arange(5.0)).sum().backward()
        grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
        return lp.detach(), ent, grads

    plain_lp, plain_ent, plain_grads = run()
    calls: list[int] = []

    def counted(*args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        calls.append(1)
        return chunked_logprobs(*args, **kwargs)

    monkeypatch.setattr(_policy, "chunked_logprobs", counted)
    monkeypatch.setattr(_head, "MIN_CHUNKED_ELEMENTS", 0)
    monkeypatch.setattr(_head, "CHUNK_ELEMENTS", 2 * lm.model.config.vocab_size)  # 2-row chunks
    chunk_lp, chunk_ent, chunk_grads = run()
    assert calls == [1]

    torch.testing.assert_close(chunk_lp, plain_lp, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(chunk_ent, plain_ent, rtol=1e-5, atol=1e-5)
    assert len(chunk_grads) == len(plain_grads) > 0
    for got, want in zip(chunk_grads, plain_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
