"""The CPU attention function against torch's SDPA: same outputs and gradients."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from osmosis_trainer import attention as attn
from osmosis_trainer.models import load_model


class _Module(torch.nn.Module):
    is_causal = True
    num_key_value_groups = 3  # the tests' 6 query heads over 2 key/value heads


def _sdpa(q: Any, k: Any, v: Any, mask: Any) -> Any:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward(_Module(), q, k, v, mask)[0]


def _inputs(b: int, h: int, kv: int, q: int, k: int) -> tuple[Any, Any, Any]:
    gen = torch.Generator().manual_seed(b * 100 + q)
    shape = lambda heads, n: (b, heads, n, 16)  # noqa: E731
    return (
        torch.randn(shape(h, q), generator=gen, requires_grad=True),
        torch.randn(shape(kv, k), generator=gen, requires_grad=True),
        torch.randn(shape(kv, k), generator=gen, requires_grad=True),
    )


def _padding_mask(b: int, q: int, k: int, pad: list[int]) -> torch.Tensor:
    """sdpa_mask's form: bool [B, 1, Q, K], causal, the first ``pad[i]`` keys of row i masked."""
    causal = torch.ones(q, k, dtype=torch.bool).tril(k - q)
    keys = torch.arange(k)[None, :] >= torch.tensor(pad)[:, None]  # [B, K]
    return causal[None, None] & keys[:, None, None, :]


@pytest.mark.parametrize(
    ("q", "k", "pad"),
    [
        (7, 7, None),  # training forward: plain causal, no mask
        (5, 12, [0, 0]),  # continuation of a cached (shared) prefix
        (1, 9, [0, 3]),  # one decoding step over a left-padded cache
        (6, 6, [0, 2]),  # left-padded prefill: row 1's first queries see nothing
    ],
)
def test_plain_attention_equals_sdpa(q: int, k: int, pad: list[int] | None) -> None:
    b, h, kv = 2, 6, 2  # grouped-query: 3 query heads per key/value head
    mask = None if pad is None else _padding_mask(b, q, k, pad)
    query, key, value = _inputs(b, h, kv, q, k)
    got, _ = attn.attention(_Module(), query, key, value, mask)
    want = _sdpa(query, key, value, mask)
    valid = slice(None) if pad is None else slice(max(pad), None)  # fully masked queries differ
    assert got.shape == want.shape == (b, q, h, 16)
    assert torch.allclose(got[:, valid], want[:, valid], atol=1e-5)
    grads = torch.autograd.grad(got[:, valid].sum(), (query, key, value))
    ref = torch.autograd.grad(want[:, valid].sum(), (query, key, value))
    for mine, theirs in zip(grads, ref, strict=True):
        assert torch.allclose(mine, theirs, atol=1e-5)
    assert torch.isfinite(got).all()  # no NaN where a padded query attends to nothing


def test_large_score_matrices_go_to_sdpa(monkeypatch: pytest.MonkeyPatch) -> None:
    import transformers.integrations.sdpa_attention as sdpa

    calls: list[tuple[int, ...]] = []
    real = sdpa.sdpa_attention_forward

    def spy(module: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(tuple(query.shape))
        return real(module, query, *args, **kwargs)

    monkeypatch.setattr(sdpa, "sdpa_attention_forward", spy)
    small = _inputs(1, 2, 2, 8, 8)
    attn.attention(_Module(), *small, None)
    assert calls == []
    monkeypatch.setattr(attn, "_MAX_SCORES", 64)
    attn.attention(_Module(), *small, None)
    assert calls == [(1, 2, 8, 16)]


def test_cpu_models_load_with_it_and_compute_the_same_logits(tiny_model_dir: Path) -> None:
    model = load_model(str(tiny_model_dir)).model
    assert model.config._attn_implementation == attn.NAME
    ids = torch.tensor([[3, 9, 4, 11, 5, 7], [1, 1, 6, 2, 8, 10]])
    mask = torch.tensor([[1] * 6, [0, 0, 1, 1, 1, 1]])
    with torch.no_grad():
        mine = model(input_ids=ids, attention_mask=mask).logits
        model.set_attn_implementation("sdpa")
        theirs = model(input_ids=ids, attention_mask=mask).logits
    assert torch.allclose(mine[0], theirs[0], atol=1e-4)
    assert torch.allclose(mine[1, 2:], theirs[1, 2:], atol=1e-4)
