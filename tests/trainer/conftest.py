from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random tiny Qwen2 chat model with large weights (varied, non-degenerate outputs)."""
    from osmosis_trainer.models import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", initializer_range=0.5)


@pytest.fixture(scope="session")
def tiny_loaded(tiny_model_dir: Path):  # type: ignore[no-untyped-def]
    from osmosis_trainer.models import load_model

    return load_model(str(tiny_model_dir))
