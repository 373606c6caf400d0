"""osmosis-ai 0.3's Harbor backend: each trial (one rollout) in a container of its own.

``from osmosis_ai.rollout.backend.harbor import HarborBackend, TaskMode``; see
:class:`~osmosis_ai.rollout.backend.harbor.backend.HarborBackend`. It needs a Docker daemon on
this machine (``osmosis validate`` says what to install when there is none), not the upstream
``harbor`` package.
"""

from __future__ import annotations

from osmosis_ai.rollout.backend.harbor._docker import ContainerRuntimeError
from osmosis_ai.rollout.backend.harbor.backend import HarborBackend
from osmosis_ai.rollout.backend.harbor.tasks import TaskMode

__all__ = ["ContainerRuntimeError", "HarborBackend", "TaskMode"]
