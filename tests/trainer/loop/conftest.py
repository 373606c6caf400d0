from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from osmosis_trainer.models import build_tiny_model


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random tiny Qwen2 chat model (the default small initializer)."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), seed=0)


@pytest.fixture(scope="session")
def tiny_learnable_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model with large initial weights, so LoRA can move its logits quickly."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny_lr"), initializer_range=0.5, seed=0)


@pytest.fixture(autouse=True)
def _one_torch_thread() -> Iterator[None]:
    """Tiny models gain nothing from intra-op threads, and on a shared, oversubscribed CPU
    OpenMP's spinning threads make them tens of times slower."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
