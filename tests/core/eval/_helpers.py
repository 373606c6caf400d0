"""Shared pieces of the eval tests."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

from osmosis_ai.testing import FakeOpenAIServer


def fake_server_factory(
    script: Any,
    *,
    adapter_script: Any = None,
    calls: list[tuple[str, Path | None]] | None = None,
) -> Callable[..., contextlib.AbstractAsyncContextManager[Any]]:
    """An ``endpoint_factory`` for ``run_eval`` that serves ``script`` from a fake server.

    With ``adapter_script``, a trained checkpoint (the factory is given ``adapter=``) is
    answered by it instead; ``calls`` records each ``(model, adapter)`` the eval asked for.
    """

    @contextlib.asynccontextmanager
    async def factory(
        model: str, sampling: dict[str, Any], *, adapter: Path | None = None
    ) -> AsyncIterator[Any]:
        if calls is not None:
            calls.append((model, adapter))
        chosen = adapter_script if adapter is not None and adapter_script is not None else script
        async with FakeOpenAIServer(script=chosen) as server:
            yield server

    return factory


def make_run(
    workspace: Path,
    run_id: str,
    *,
    steps: Sequence[int] = (2, 4),
    base_model: str = "embedded",
    rewards: Sequence[float | None] | None = None,
    name: str | None = None,
    status: str = "finished",
    created_at: float = 0.0,
    adapter_files: Callable[[Path], None] | None = None,
) -> Path:
    """A training run folder as the trainer writes it, with checkpoints at ``steps``.

    The adapters hold only ``adapter_config.json`` unless ``adapter_files(folder)`` writes a
    real one.
    """
    run = workspace / "runs" / run_id
    run.mkdir(parents=True)
    (run / "status.json").write_text(
        json.dumps(
            {
                "name": name or run_id.rsplit("-", 2)[0],
                "run_id": run_id,
                "status": status,
                "phase": "complete",
                "created_at": created_at,
            }
        )
    )
    (run / "config.toml").write_text(
        "[experiment]\n"
        'rollout = "calc"\nentrypoint = "main.py"\n'
        f"model_path = {json.dumps(base_model)}\n"
        'dataset = "calc"\n'
    )
    for i, step in enumerate(steps):
        ckpt = run / "checkpoints" / f"step_{step:06d}"
        adapter = ckpt / "adapter"
        adapter.mkdir(parents=True)
        if adapter_files is not None:
            adapter_files(adapter)
        else:
            (adapter / "adapter_config.json").write_text('{"peft_type": "LORA"}')
        reward = rewards[i] if rewards is not None else None
        metrics = {"reward_mean": reward} if reward is not None else {}
        (ckpt / "checkpoint.json").write_text(json.dumps({"step": step, "metrics": metrics}))
        (ckpt / "trainer_state.pt").write_bytes(b"")
    if steps:
        (run / "checkpoints" / "latest").write_text(f"step_{steps[-1]:06d}\n")
    return run
