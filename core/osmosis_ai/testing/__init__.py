"""Test doubles for rollouts: the policy gateway in front of a scripted engine.

``ScriptedEngine`` is the one scripted engine (``FakeOpenAIServer`` serves it; gateway and
training tests put it behind their own ``PolicyGateway``).

Use them to unit-test a workflow and grader without a model or network::

    from osmosis_ai.testing import FakeOpenAIServer, tool_call

    async with FakeOpenAIServer(script=[tool_call("add", a=2, b=3), "5"]) as server:
        ...  # pass `server` wherever a PolicyEndpoint goes (e.g. RolloutRunner)
"""

from __future__ import annotations

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
    "text",
    "tool_call",
]
