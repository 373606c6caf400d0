"""Schema-driven fuzzing of both HTTP servers (issue 18): the rollout server and the gateway.

Bodies are generated from each server's own request schema (the rollout server's OpenAPI
spec, the gateway's ``ChatCompletionRequest`` schema) with hostile values mixed in at every
leaf: deep nesting, lone surrogates, 5,000-digit numbers, path-like ids, huge strings.
Bounded and seeded (``derandomize``): the same examples run in every CI job.

Whatever is sent: no 5xx, every 4xx has the server's error shape, nothing is logged as an
error (no traceback), every admitted rollout reaches a terminal state, no file is written
outside the trace folder, and what the servers remember stays bounded.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("fastapi")

from osmosis_ai.remote import ClusterClient, ServerSettings, create_app  # noqa: E402
from osmosis_ai.serving.gateway import PolicyGateway  # noqa: E402
from osmosis_ai.serving.gateway._wire import ChatCompletionRequest  # noqa: E402
from osmosis_ai.testing import ScriptedEngine  # noqa: E402
from tests.core.remote._helpers import AUTH, KEY, ToolLoop, fast_client  # noqa: E402

FUZZ = settings(
    max_examples=60, deadline=None, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                           HealthCheck.data_too_large],
)

# -- values ---------------------------------------------------------------------------------

RAW_HOSTILE = [  # JSON text json.dumps cannot produce
    "[" * 3000 + "]" * 3000,
    "[" * 200 + "]" * 200,
    "9" * 5000,
    '"\\ud800"',
    "1e999",
    '{"a": ' * 100 + "1" + "}" * 100,
]
hostile_strings = st.sampled_from([
    "../../etc/passwd", "a/b", "%2F..%2F", "\x00", "calc\n", "é" * 40, "x" * 5000, " ",
    "http://user:pw@169.254.169.254/", "\u202e", "",
])
hostile = st.one_of(
    hostile_strings, st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False), st.booleans(), st.none(),
)


def from_schema(schema: dict[str, Any], defs: dict[str, Any], depth: int = 0) -> st.SearchStrategy[Any]:
    """Values shaped by a JSON schema, with a hostile value in place of any part now and then."""
    if "$ref" in schema:
        return from_schema(defs[schema["$ref"].rsplit("/", 1)[1]], defs, depth)
    options = schema.get("anyOf") or schema.get("oneOf")
    if options:
        return st.one_of([from_schema(o, defs, depth) for o in options])
    if "enum" in schema:
        shaped: st.SearchStrategy[Any] = st.sampled_from(schema["enum"])
    elif "const" in schema:
        shaped = st.just(schema["const"])
    else:
        shaped = _by_type(schema, defs, depth)
    return st.one_of(shaped, shaped, shaped, hostile)


def _by_type(schema: dict[str, Any], defs: dict[str, Any], depth: int) -> st.SearchStrategy[Any]:
    kind = schema.get("type")
    if kind == "object" or "properties" in schema:
        props = schema.get("properties", {})
        if depth > 3 or not props:
            return st.dictionaries(st.text(max_size=8), hostile, max_size=3)
        required = set(schema.get("required", []))
        return st.fixed_dictionaries(
            {k: from_schema(v, defs, depth + 1) for k, v in props.items() if k in required},
            optional={k: from_schema(v, defs, depth + 1) for k, v in props.items()
                      if k not in required},
        )
    if kind == "array":
        items = schema.get("items", {})
        inner = from_schema(items, defs, depth + 1) if depth <= 3 else hostile
        return st.lists(inner, max_size=3)
    if kind == "string":
        return st.one_of(st.text(max_size=30), hostile_strings)
    if kind == "integer":
        return st.integers(min_value=-5, max_value=10_000)
    if kind == "number":
        return st.floats(min_value=-1, max_value=3, allow_nan=False)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    return hostile


@st.composite
def bodies(draw: st.DrawFn, schema: dict[str, Any], defs: dict[str, Any]) -> bytes:
    """A JSON body from the schema; sometimes one field's value is raw hostile JSON text."""
    value = draw(from_schema(schema, defs))
    text = json.dumps(value)
    if isinstance(value, dict) and value and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(value)))
        text = json.dumps({k: v for k, v in value.items() if k != key})[:-1]
        text += (", " if len(text) > 1 else "") + json.dumps(key) + ": " + draw(st.sampled_from(RAW_HOSTILE)) + "}"
    return text.encode("utf-8", "surrogatepass")


def _no_error_logs(records: list[logging.LogRecord]) -> None:
    bad = [r for r in records if r.levelno >= logging.ERROR or r.exc_info]
    assert not bad, [r.getMessage()[:200] for r in bad]


# -- the rollout server ---------------------------------------------------------------------


class RolloutHarness:
    def __init__(self, log_dir: Path) -> None:
        self.runner = asyncio.Runner()
        settings_ = ServerSettings(max_body_bytes=256 * 1024, shutdown_grace_seconds=0.5,
                                   max_finished_records=40, max_finished_bytes=200_000)
        self.app = create_app(ToolLoop(), api_key=KEY, client_settings=fast_client(),
                              settings=settings_, log_dir=log_dir)
        answers = httpx.MockTransport(lambda r: httpx.Response(200, json={
            "choices": [{"message": {"role": "assistant", "content": "ok"},
                         "finish_reason": "stop"}], "usage": {}}))
        self.registry = self.app.state.registry
        self.registry.client = ClusterClient(fast_client(), http=httpx.AsyncClient(transport=answers))
        self.lifespan = self.app.router.lifespan_context(self.app)
        self.runner.run(self.lifespan.__aenter__())
        self.client = httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app),
                                        base_url="http://t")
        self.admitted: set[str] = set()

    def post(self, body: bytes) -> httpx.Response:
        return self.runner.run(self.client.post(
            "/v1/rollout/init", content=body, headers={**AUTH, "content-type": "application/json"}))

    def settle(self) -> None:
        """Every admitted rollout reaches a terminal state (the wait never decides the test:
        a stuck rollout hangs here and the suite's timeout fails it)."""
        async def all_done() -> None:
            for rid in self.admitted:
                await self.registry.finished(rid)
        self.runner.run(all_done())

    def close(self) -> None:
        self.runner.run(self.client.aclose())
        self.runner.run(self.lifespan.__aexit__(None, None, None))
        self.runner.close()


@pytest.fixture(scope="module")
def rollout_harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RolloutHarness]:
    h = RolloutHarness(tmp_path_factory.mktemp("traces"))
    yield h
    h.close()


_spec = create_app(ToolLoop(), api_key=KEY).openapi()
_DEFS = _spec["components"]["schemas"]
_INIT = _spec["paths"]["/v1/rollout/init"]["post"]["requestBody"]["content"]["application/json"]["schema"]


@FUZZ
@given(body=bodies(_INIT, _DEFS))
def test_rollout_server_answers_any_init_without_5xx(
    rollout_harness: RolloutHarness, body: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    resp = rollout_harness.post(body)
    assert resp.status_code < 500, resp.text
    assert "Traceback" not in resp.text
    if resp.status_code == 202:
        rollout_harness.admitted.add(resp.json()["rollout_id"])
    else:
        assert isinstance(resp.json().get("error"), str), resp.text
    _no_error_logs(caplog.records)


def test_rollout_server_after_the_fuzz_run(rollout_harness: RolloutHarness) -> None:
    """Runs after the fuzz test (same module, file order): nothing stuck, nothing outside the
    trace folder, remembered results bounded."""
    h = rollout_harness
    h.settle()
    reg = h.registry
    assert reg.pending == 0 and reg.running == 0
    assert len(reg.records.finished) <= 40 and reg.finished_bytes <= 200_000
    folder = h.app.state.trace_folder
    root = folder.parent
    outside = [p for p in root.rglob("*") if p.is_file() and folder not in p.parents]
    assert outside == []


# -- the gateway ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gateway() -> Iterator[PolicyGateway]:
    engine = ScriptedEngine(lambda _req: "ok")
    with PolicyGateway(engine, max_body_bytes=256 * 1024) as gw:
        gw.store.max_rollouts = 30
        yield gw


_CHAT = ChatCompletionRequest.model_json_schema()
_SAMPLE_IDS = st.one_of(st.sampled_from(["main", "agent-2"]), hostile_strings, st.text(max_size=12))


@FUZZ
@given(body=bodies(_CHAT, _CHAT.get("$defs", {})), rollout=st.text(max_size=12), sample=_SAMPLE_IDS)
def test_gateway_answers_any_chat_body_without_5xx(
    gateway: PolicyGateway, body: bytes, rollout: str, sample: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    headers = {"content-type": "application/json"}
    for name, value in (("x-osmosis-rollout-id", rollout), ("x-osmosis-sample-id", sample)):
        if value.isprintable() and value.isascii() and value == value.strip():
            headers[name] = value
    resp = httpx.post(gateway.url + "/v1/chat/completions", content=body, headers=headers, timeout=60)
    assert resp.status_code < 500, resp.text
    if resp.status_code >= 400:
        error = resp.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert "Traceback" not in error["message"]
    _no_error_logs(caplog.records)


def test_gateway_after_the_fuzz_run(gateway: PolicyGateway) -> None:
    """Calls for rollout ids nobody collects stay bounded."""
    assert len(gateway.store.pending()) <= 30
