"""HFProcessEngine: the HF engine in a child process answers like the in-process one."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from osmosis_ai.serving import EngineError, GenerationRequest  # noqa: E402
from osmosis_trainer.engines import HFEngine, HFProcessEngine  # noqa: E402
from tests.trainer.engines.test_hf_shared import _adapter  # noqa: E402


def _req(i: int, **kw: Any) -> GenerationRequest:
    return GenerationRequest(
        messages=[{"role": "user", "content": f"What is {i} + 1?"}], max_tokens=6, seed=100 + i,
        **kw,
    )


async def test_child_generates_loads_adapters_and_matches_in_process(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    adapter = _adapter(tiny_model_dir, tmp_path / "a1", seed=1)
    local = HFEngine(str(tiny_model_dir), device="cpu", seed=0)
    child = HFProcessEngine(str(tiny_model_dir), device="cpu", torch_threads=1, seed=0)
    try:
        assert child.model_name == local.model_name
        for engine in (local, child):
            await engine.load_adapter(str(adapter), 1)
        got = await asyncio.gather(*(child.generate(_req(i)) for i in range(4)))
        want = await asyncio.gather(*(local.generate(_req(i)) for i in range(4)))
        assert child.policy_version == 1
        for a, b in zip(got, want, strict=True):  # seeded requests: identical tokens
            assert a.completion_token_ids == b.completion_token_ids
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)
            assert a.model == b.model and a.policy_version == 1
        with pytest.raises(EngineError, match="not a PEFT adapter folder"):
            await child.load_adapter(str(tmp_path / "missing"), 2)
        assert child.policy_version == 1  # the failed load changed nothing
        assert (await child.generate(_req(0))).completion_token_ids == got[0].completion_token_ids
    finally:
        await child.close()
        await local.close()
    with pytest.raises(EngineError, match="exited"):
        await child.generate(_req(0))


def test_a_model_that_cannot_load_fails_with_the_childs_error(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="could not start") as err:
        HFProcessEngine(str(tmp_path / "no-such-model"), device="cpu", start_timeout_s=120)
    assert "no-such-model" in str(err.value)
