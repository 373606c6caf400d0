"""A ScriptedEngine whose generations and adapter loads wait for the test (events, not sleeps).

Tests of the gateway's swap and late-call handling need a call to be *in flight* or a load
to be *running* at a known moment; a sleep only makes that likely. The waits below are
generous safety nets against a hang and never decide a pass.
"""

from __future__ import annotations

import asyncio
from typing import Any

from osmosis_ai.serving import GenerationRequest, GenerationResult
from osmosis_ai.testing import Script, ScriptedEngine

__all__ = ["GatedEngine", "watch_admissions"]

HANG_S = 120.0


class GatedEngine(ScriptedEngine):
    """``generating`` is set once a generation entered the engine; it then waits for
    ``release_generation``. ``loading`` / ``release_load`` do the same for adapter loads.
    Gates left open (the default for loads) let calls through at once. The script is walked
    in arrival order (``per_sample=False``)."""

    def __init__(self, script: Script = (), **kwargs: Any) -> None:
        super().__init__(script, per_sample=False, **kwargs)
        self.generating = asyncio.Event()
        self.release_generation = asyncio.Event()
        self.loading = asyncio.Event()
        self.release_load = asyncio.Event()
        self.release_load.set()

    async def generate(self, req: GenerationRequest) -> GenerationResult:
        self.generating.set()
        await asyncio.wait_for(self.release_generation.wait(), HANG_S)
        return await super().generate(req)

    async def load_adapter(self, path: str, version: int) -> None:
        self.loading.set()
        await asyncio.wait_for(self.release_load.wait(), HANG_S)
        await super().load_adapter(path, version)


def watch_admissions(gw: Any) -> dict[str, asyncio.Event]:
    """Events set when a call waits for a swap (``waiting``) and when one is refused (``busy``)."""
    events = {"waiting": asyncio.Event(), "busy": asyncio.Event()}
    original = gw.admit

    async def admit() -> None:
        if gw._paused:
            events["waiting"].set()
        try:
            await original()
        except Exception:
            events["busy"].set()
            raise

    gw.admit = admit
    return events
