"""A call's ``max_tokens`` clamped to ``[sampling] max_tokens`` and to the model's context
window, said once (issue 39 §4: osmosis-ai 0.3's templates ask 16384 tokens per call)."""

from __future__ import annotations

import logging

import httpx
import pytest

from osmosis_ai.config import SamplingConfig
from osmosis_ai.serving.gateway import PolicyGateway
from osmosis_ai.testing import ScriptedEngine

pytest.importorskip("fastapi")


def test_the_context_window_caps_a_call_and_is_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gw = PolicyGateway(ScriptedEngine(context_window=2048))
    with caplog.at_level(logging.WARNING, logger="osmosis"):
        assert gw.clamp_max_tokens(16384) == 2048
        assert gw.clamp_max_tokens(9000) == 2048
    assert gw.clamp_max_tokens(512) == 512
    assert gw.clamp_max_tokens(None) is None  # the engine's own default
    assert gw.stats["max_tokens_clamped"] == 2
    said = [r.getMessage() for r in caplog.records if "clamped" in r.getMessage()]
    assert said == [
        "a policy call asked for max_tokens=16384; clamped to 2048 (the model's context "
        "window); set [sampling] max_tokens in the config to bound every call. Said once; "
        "the gateway counts every clamped call"
    ]


def test_sampling_max_tokens_caps_below_the_window(caplog: pytest.LogCaptureFixture) -> None:
    gw = PolicyGateway(ScriptedEngine(context_window=8192), sampling=SamplingConfig(max_tokens=64))
    with caplog.at_level(logging.WARNING, logger="osmosis"):
        assert gw.clamp_max_tokens(16384) == 64
    assert gw.clamp_max_tokens(None) == 64  # applies when the call asks none
    assert gw.clamp_max_tokens(32) == 32
    assert "clamped to 64 ([sampling] max_tokens). Said once" in caplog.text


def test_an_engine_without_a_known_window_passes_the_ask_through() -> None:
    engine = ScriptedEngine()
    del engine.context_window  # e.g. a hosted model through LiteLLM
    assert PolicyGateway(engine).clamp_max_tokens(16384) == 16384


async def test_a_clamped_call_reaches_the_engine_with_the_cap() -> None:
    engine = ScriptedEngine(["ok"], context_window=100)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16384}
    async with PolicyGateway(engine) as gw, httpx.AsyncClient() as c:
        resp = await c.post(gw.url + "/v1/chat/completions", json=body)
        assert resp.status_code == 200, resp.text
    generation = engine.requests[0].generation
    assert generation is not None and generation.max_tokens == 100
