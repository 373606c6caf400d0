"""Test doubles for rollouts: the policy gateway in front of a scripted engine.

``ScriptedEngine`` is the one scripted engine (``FakeOpenAIServer`` serves it; gateway and
training tests put it behind their own ``PolicyGateway``).

``FakeCluster`` plays the training cluster for a remote rollout server (scripted
``/v1/chat/completions``, recorded ``/v1/rollout/completed``, injected faults);
``serve_in_loop`` serves an ASGI app on 127.0.0.1 inside the running event loop.

Use them to unit-test a workflow and grader without a model or network::

    from osmosis_ai.testing import FakeOpenAIServer, tool_call

    async with FakeOpenAIServer(script=[tool_call("add", a=2, b=3), "5"]) as server:
        ...  # pass `server` wherever a PolicyEndpoint goes (e.g. RolloutRunner)
"""

from __future__ import annotations

from osmosis_ai.testing._cluster import FakeCluster, serve_in_loop, tool_call_message
from osmosis_ai.testing._endpoint import RecordingEndpoint
from osmosis_ai.testing._engine import ScriptedEngine
from osmosis_ai.testing._fake_server import FakeOpenAIServer
from osmosis_ai.testing._script import (
    FakeReply,
    FakeRequest,
    HTTPFailure,
    Script,
    ScriptItem,
    http_error,
    rate_limited,
    reply,
    text,
    tool_call,
)
from osmosis_ai.testing._tokenizer import FakeTokenizer

__all__ = [
    "FakeCluster",
    "FakeOpenAIServer",
    "FakeReply",
    "FakeRequest",
    "FakeTokenizer",
    "HTTPFailure",
    "RecordingEndpoint",
    "Script",
    "ScriptItem",
    "ScriptedEngine",
    "http_error",
    "rate_limited",
    "reply",
    "serve_in_loop",
    "text",
    "tool_call",
    "tool_call_message",
]
