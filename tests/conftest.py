"""Fixtures for tests in every package."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator

import pytest


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
