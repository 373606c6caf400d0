from __future__ import annotations

import sys
from collections.abc import AsyncIterator
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


@pytest.fixture
async def litellm_worker_stopped() -> AsyncIterator[None]:
    """For tests that make real ``litellm.acompletion`` calls: litellm starts a global logging
    task on the test's event loop and leaves it pending when the loop closes; garbage-collected
    later, it raises "Event loop is closed" inside whichever test runs then (seen in
    ``nox -s lowest``). Stop it on its own loop."""
    yield
    worker = sys.modules.get("litellm.litellm_core_utils.logging_worker")
    if worker is not None:  # litellm was imported (a test may skip without it)
        await worker.GLOBAL_LOGGING_WORKER.stop()
