from __future__ import annotations

from pathlib import Path

import pytest

from osmosis_trainer.models import build_tiny_model
from tests.torch_threads import _one_torch_thread  # noqa: F401  (autouse fixture)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random tiny Qwen2 chat model (the default small initializer)."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), seed=0)


@pytest.fixture(scope="session")
def tiny_learnable_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model with large initial weights, so LoRA can move its logits quickly."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny_lr"), initializer_range=0.5, seed=0)

