from __future__ import annotations

import warnings
from pathlib import Path
from types import SimpleNamespace

import torch

from osmosis_trainer._kv import cache_kwargs, output_cache


class _OldModel:  # transformers <= 5.20
    def forward(self, input_ids: object = None, past_key_values: object = None) -> None: ...


class _NewModel:  # transformers >= 5.2x
    def forward(self, input_ids: object = None, cache: object = None) -> None: ...


class _Wrapped:  # peft's wrapper: forward(*args, **kwargs)
    def __init__(self, base: object) -> None:
        self.base = base

    def forward(self, *args: object, **kwargs: object) -> None: ...

    def get_base_model(self) -> object:
        return self.base


def test_the_keyword_follows_the_models_own_forward() -> None:
    kv = object()
    assert cache_kwargs(_OldModel(), kv) == {"past_key_values": kv}  # type: ignore[arg-type]
    assert cache_kwargs(_NewModel(), kv) == {"cache": kv}  # type: ignore[arg-type]
    assert cache_kwargs(_Wrapped(_NewModel()), kv) == {"cache": kv}  # type: ignore[arg-type]


def test_the_filled_cache_is_read_under_either_name() -> None:
    kv = object()
    assert output_cache(SimpleNamespace(cache=kv)) is kv  # type: ignore[arg-type]
    assert output_cache(SimpleNamespace(past_key_values=kv)) is kv  # type: ignore[arg-type]


def test_the_installed_transformers_gets_its_keyword_without_a_warning(
    tiny_model_dir: Path,
) -> None:
    from transformers import DynamicCache

    from osmosis_trainer.models import load_model

    model = load_model(str(tiny_model_dir)).model
    ids = torch.tensor([[5, 6, 7, 8]])
    kv = DynamicCache(config=model.config)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a deprecated keyword would raise here
        out = model(input_ids=ids, use_cache=True, **cache_kwargs(model, kv))  # type: ignore[arg-type]
    assert output_cache(out) is kv
    assert kv.get_seq_length() == 4
