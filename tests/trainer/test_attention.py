from __future__ import annotations

import copy
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest
import torch

import osmosis_trainer._attention as attention
from osmosis_trainer._attention import install_attention_rule, pick_attention
from osmosis_trainer._kv import cache_kwargs

if TYPE_CHECKING:
    from osmosis_trainer._protocols import KVCache


def test_small_score_matrices_run_eager_and_big_ones_sdpa() -> None:
    limit = attention.EAGER_MAX_SCORES
    assert pick_attention(32, 9, 1, 600) == "eager"  # a decode step
    assert pick_attention(1, 1, 1, limit) == "eager"
    assert pick_attention(1, 1, 1, limit + 1) == "sdpa"
    assert pick_attention(2, 9, 2000, 2000) == "sdpa"  # long rows: eager keeps 72M scores


@pytest.fixture
def loaded(tiny_model_dir: Path):  # type: ignore[no-untyped-def]
    from osmosis_trainer.models import load_model

    return load_model(str(tiny_model_dir))


def _seen(model: Any) -> str:
    return str(model.config._attn_implementation)


def test_each_forward_picks_by_its_own_shape(loaded, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    model = loaded.model
    ids = torch.randint(5, 200, (2, 12))
    with torch.no_grad():
        small = model(input_ids=ids).logits
        assert _seen(model) == "eager"
        monkeypatch.setattr(attention, "EAGER_MAX_SCORES", 0)
        big = model(input_ids=ids).logits
        assert _seen(model) == "sdpa"
    # transformers' two implementations compute the same attention.
    torch.testing.assert_close(small, big, atol=1e-4, rtol=1e-4)


def test_a_cached_decode_step_counts_the_cache_as_keys(loaded, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    from transformers import DynamicCache

    model = loaded.model
    heads = model.config.num_attention_heads
    ids = torch.randint(5, 200, (1, 20))
    # One query over 21 keys runs eager only if the cache's 20 keys are counted.
    monkeypatch.setattr(attention, "EAGER_MAX_SCORES", heads * 20)
    with torch.no_grad():
        cache = cast("KVCache", DynamicCache(config=model.config))
        model(input_ids=ids, use_cache=True, **cache_kwargs(model, cache))
        assert _seen(model) == "sdpa"  # 20 x 20 scores per head
        model(input_ids=ids[:, :1], use_cache=True, **cache_kwargs(model, cache))
        assert _seen(model) == "sdpa"  # 1 x 21 > 20
        monkeypatch.setattr(attention, "EAGER_MAX_SCORES", heads * 22)
        model(input_ids=ids[:, :1], use_cache=True, **cache_kwargs(model, cache))
        assert _seen(model) == "eager"  # 1 x 22


def test_a_deep_copy_keeps_the_rule_with_a_config_of_its_own(loaded, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    model = loaded.model
    twin = copy.deepcopy(model)
    ids = torch.randint(5, 200, (1, 8))
    with torch.no_grad():
        model(input_ids=ids)
        monkeypatch.setattr(attention, "EAGER_MAX_SCORES", 0)
        twin(input_ids=ids)
    assert (_seen(model), _seen(twin)) == ("eager", "sdpa")


def test_a_model_that_cannot_switch_is_left_alone() -> None:
    plain = torch.nn.Linear(2, 2)
    install_attention_rule(plain)  # no decoder, no transformers config: nothing to do
    assert not plain._forward_pre_hooks
