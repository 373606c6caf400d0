"""The HF engine decoding on a shared executor's thread (a training job's compute thread)."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

pytest.importorskip("transformers")

from osmosis_ai.serving import EngineError, GenerationRequest  # noqa: E402
from osmosis_trainer.engines import HFEngine  # noqa: E402


def _req(content: str) -> GenerationRequest:
    return GenerationRequest(messages=[{"role": "user", "content": content}], max_tokens=4)


async def test_decodes_on_the_executor_and_leaves_it_between_batches(tiny_loaded: Any) -> None:
    with ThreadPoolExecutor(1, thread_name_prefix="compute") as compute:
        engine = HFEngine(tiny_loaded, device="cpu", max_batch_size=8, seed=0, executor=compute)
        decoded_on: set[str] = set()
        handle = engine._handle

        def recording(item: Any) -> bool:
            decoded_on.add(threading.current_thread().name)
            return bool(handle(item))

        engine._handle = recording  # type: ignore[method-assign]
        first = await asyncio.gather(*(engine.generate(_req(f"q{i}")) for i in range(4)))
        assert all(r.completion_token_ids for r in first)
        assert engine._worker is None  # no thread of the engine's own
        # The drain returned once the queue was empty: other work gets the same thread
        # (a drain that never returned would hold this future forever).
        other = await asyncio.wrap_future(compute.submit(lambda: threading.current_thread().name))
        assert decoded_on == {other}
        # A request after an idle spell starts a new drain.
        again = await engine.generate(_req("again"))
        assert again.completion_token_ids
        await engine.close()
        with pytest.raises(EngineError, match="closed"):
            await engine.generate(_req("late"))


async def test_samples_what_the_engines_own_thread_samples(tiny_loaded: Any) -> None:
    own = HFEngine(tiny_loaded, device="cpu", seed=7)
    with ThreadPoolExecutor(1) as compute:
        shared = HFEngine(tiny_loaded, device="cpu", seed=7, executor=compute)
        try:
            a = await own.generate(_req("same prompt"))
            b = await shared.generate(_req("same prompt"))
        finally:
            await own.close()
            await shared.close()
    assert a.completion_token_ids == b.completion_token_ids
    assert a.logprobs == b.logprobs
