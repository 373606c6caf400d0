"""One real two-node local Ray cluster for this folder's tests (``nox -s ray``)."""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests.trainer.distributed._ray_cluster import local_cluster


@pytest.fixture(scope="session")
def cluster_address() -> Any:
    saved = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "disabled"  # the driver joins like the nodes (loopback)
    try:
        with local_cluster() as address:
            yield address
    finally:
        if saved is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = saved
