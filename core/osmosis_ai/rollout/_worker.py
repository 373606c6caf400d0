"""The worker process of :class:`~osmosis_ai.rollout._backends.ProcessBackend`.

Run as ``python -m osmosis_ai.rollout._worker``. Protocol: length-prefixed pickle frames; the
parent sends an init frame, then one job frame per rollout; the worker answers ``ready`` (or
``init_error``), then one ``result`` per job. It exits at end of input. The protocol uses a
private copy of stdout; fd 1 is pointed at stderr so the user's prints cannot corrupt it.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import sys
from dataclasses import dataclass
from typing import Any

__all__ = ["main"]


@dataclass(frozen=True)
class _RouteTemplate:
    """A PolicyEndpoint stand-in: routes from the parent's template; collect runs there."""

    base_url: str
    api_key: str
    model: str

    def route(self, rollout_id: str, sample_id: str) -> Any:
        from osmosis_ai.rollout._backends import SAMPLE_PLACEHOLDER
        from osmosis_ai.rollout.scope import PolicyRoute

        return PolicyRoute(
            base_url=self.base_url.replace(SAMPLE_PLACEHOLDER, sample_id),
            api_key=self.api_key,
            model=self.model,
        )

    async def collect(self, rollout_id: str) -> dict[str, Any]:  # pragma: no cover - unused
        raise RuntimeError("policy calls are collected by the runner, not the worker")


def _limit_memory(mb: int | None) -> None:
    if not mb:
        return
    import resource

    limit = mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def main() -> int:
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    from osmosis_ai.rollout._backends import read_frame, write_frame

    inp = sys.stdin.buffer
    init = read_frame(inp)
    if init is None:
        return 0
    sys.path[:0] = [p for p in init["sys_path"] if p not in sys.path]
    try:
        from osmosis_ai.rollout._discovery import load_entrypoint

        entrypoint = load_entrypoint(init["path"])
        if init["config"] is not None:
            from dataclasses import replace

            entrypoint = replace(entrypoint, workflow_config=pickle.loads(init["config"]))
        _limit_memory(init["memory_limit_mb"])
    except Exception as exc:
        write_frame(out, {"kind": "init_error", "message": f"{type(exc).__name__}: {exc}"})
        return 1
    write_frame(out, {"kind": "ready"})
    from osmosis_ai.rollout._execution import execute_workflow

    with asyncio.Runner() as runner:
        while (job := read_frame(inp)) is not None:
            endpoint = _RouteTemplate(**job["route"])
            run = runner.run(execute_workflow(entrypoint, job["request"], endpoint))
            write_frame(out, {"kind": "result", "run": run.to_wire()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
