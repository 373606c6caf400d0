"""osmosis-ai 0.3's execution backends: where a rollout's workflow runs.

An 0.3 entrypoint builds a backend and serves it::

    backend = LocalBackend(workflow=MyWorkflow, workflow_config=config, grader=MyGrader)
    app = create_rollout_server(backend=backend)

osmosis finds that backend when it loads the entrypoint (``osmosis validate``, ``eval run``,
``train submit``, ``test``) and runs its workflow and grader on the one runner every rollout
uses: :meth:`ExecutionBackend.entrypoint` says what runs, :meth:`ExecutionBackend.runner_backend`
says where (in-process for :class:`LocalBackend`, a container per trial for ``HarborBackend``).
:meth:`ExecutionBackend.execute` is 0.3's own entry point, used by ``create_rollout_server`` and
by harnesses that drive a backend directly.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from osmosis_ai._lazy import lazy_attributes
from osmosis_ai.rollout._backends import Backend
from osmosis_ai.rollout._backends import LocalBackend as _InProcess
from osmosis_ai.rollout._discovery import Entrypoint, ServedBackend
from osmosis_ai.rollout.scope import PolicyEndpoint
from osmosis_ai.rollout.types import ExecutionRequest, ExecutionResult

if TYPE_CHECKING:
    from osmosis_ai.rollout.backend.harbor import HarborBackend
    from osmosis_ai.rollout.backend.local import LocalBackend

__all__ = ["ExecutionBackend", "HarborBackend", "LocalBackend", "ResultCallback"]

ResultCallback = Callable[[ExecutionResult], Awaitable[None]]
"""Called with a backend's result: once the workflow ends, once grading ends."""


class ExecutionBackend(ServedBackend):
    """Runs rollouts for a rollout server, and tells osmosis's runner what to run and where.

    Subclasses call ``super().__init__()`` so that osmosis sees a backend an entrypoint builds
    (discovery knows it as a :class:`~osmosis_ai.rollout._discovery.ServedBackend`).
    """

    @abstractmethod
    async def execute(
        self,
        request: ExecutionRequest,
        on_workflow_complete: ResultCallback,
        on_grader_complete: ResultCallback | None = None,
    ) -> None:
        """Run one rollout; report the workflow's result, then (if asked) the graded one."""

    @abstractmethod
    def entrypoint(self) -> Entrypoint:
        """The workflow, grader and configs this backend runs, for osmosis's runner."""

    def runner_backend(self, entrypoint: Entrypoint, endpoint: PolicyEndpoint) -> Backend:
        """Where osmosis's runner runs the workflows (default: in its own event loop)."""
        return _InProcess(entrypoint, endpoint)

    def validate(self) -> None:  # noqa: B027 - an optional hook, empty by design
        """Check that this backend can run here (raise with what to install or fix)."""

    @property
    def max_concurrency(self) -> int:
        """The most rollouts this backend runs at once (0: no limit)."""
        return 0

    @property
    def capture_final_result(self) -> bool:
        """True for backends that compute the reward themselves."""
        return False

    def has_capacity(self) -> bool:
        """Whether another rollout can be admitted now (a server answers 429 when not)."""
        return True

    def rollout_status(self, rollout_id: str) -> dict[str, Any] | None:
        """The live or retained state of one rollout; ``None`` when unknown."""
        return None

    def cancel_rollouts(
        self,
        ids: Sequence[str] | None = None,
        prefix: str | None = None,
        all: bool = False,  # noqa: A002 - 0.3's keyword
    ) -> dict[str, str]:
        """Cancel matching in-flight rollouts; rollout id -> what happened to it."""
        return {}

    def health(self) -> dict[str, Any]:
        """What ``GET /health`` answers."""
        return {"status": "ok"}


_LAZY = {
    "LocalBackend": "osmosis_ai.rollout.backend.local",
    "HarborBackend": "osmosis_ai.rollout.backend.harbor",
}


__getattr__ = lazy_attributes(__name__, _LAZY)
