"""Property-based tests: whatever a client sends, the rollout server never answers 5xx.

The server's outbound client is replaced by a mock transport, so admitted rollouts (whatever
their ``server_url``) never touch the network.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from osmosis_ai.remote import ClusterClient, ServerSettings, create_app
from tests.core.remote._helpers import AUTH, KEY, ToolLoop, fast_client

PROPERTY_SETTINGS = settings(
    max_examples=120, deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=15,
)
urls = st.one_of(
    st.just("http://127.0.0.1:9"), st.just("https://cluster.invalid"), st.text(max_size=30),
    st.builds(lambda s: f"http://{s}", st.text(max_size=20)),
)
fields = {
    "rollout_id": st.one_of(st.text(max_size=300), json_values),
    "server_url": st.one_of(urls, json_values),
    "messages": st.one_of(st.lists(st.dictionaries(st.sampled_from(["role", "content"]), json_values), max_size=3), json_values),
    "completion_params": st.one_of(
        st.fixed_dictionaries({}, optional={
            "temperature": json_values, "top_p": json_values, "max_tokens": json_values,
            "stop": json_values, "logprobs": json_values}),
        json_values),
    "max_turns": st.one_of(st.integers(), json_values),
    "max_tokens_total": st.one_of(st.integers(), json_values),
    "metadata": json_values,
    "api_key": json_values,
    "idempotency_key": json_values,
    "tool_server_url": st.one_of(urls, json_values),
}
request_bodies = st.fixed_dictionaries({}, optional=fields)
messages = st.lists(st.fixed_dictionaries({"role": st.sampled_from(["system", "user"]),
                                           "content": st.text(max_size=40)}), max_size=3)
valid_bodies = st.fixed_dictionaries(
    {"rollout_id": st.text(min_size=1, max_size=256).filter(str.strip),
     "server_url": st.sampled_from(["http://127.0.0.1:9", "https://127.0.0.1:9/base/"])},
    optional={
        "messages": messages,
        "completion_params": st.fixed_dictionaries({}, optional={
            "temperature": st.floats(0, 2), "top_p": st.floats(0.01, 1), "max_tokens": st.integers(1, 10_000),
            "stop": st.lists(st.text(max_size=5), max_size=2), "logprobs": st.booleans(),
            "extra_param": json_values}),
        "max_turns": st.integers(1, 100), "max_tokens_total": st.integers(1, 100_000),
        "metadata": st.dictionaries(st.text(max_size=10), json_values, max_size=4),
        "api_key": st.text(max_size=40), "idempotency_key": st.text(min_size=1, max_size=50),
    },
)


@st.composite
def near_valid_bodies(draw: st.DrawFn) -> dict[str, Any]:
    """A valid body with zero to two fields replaced by anything."""
    body = draw(valid_bodies)
    for name in draw(st.lists(st.sampled_from(sorted(fields)), max_size=2, unique=True)):
        body[name] = draw(fields[name])
    return body


class Harness:
    """One app (lifespan running) on a private event loop, called synchronously."""

    def __init__(self) -> None:
        self.runner = asyncio.Runner()
        self.app = create_app(ToolLoop(), api_key=KEY, client_settings=fast_client(),
                              settings=ServerSettings(max_body_bytes=64 * 1024, shutdown_grace_seconds=0.5))
        mock = httpx.AsyncClient(transport=httpx.MockTransport(lambda r: httpx.Response(503)))
        self.app.state.registry.client = ClusterClient(fast_client(), http=mock)
        self.lifespan = self.app.router.lifespan_context(self.app)
        self.runner.run(self.lifespan.__aenter__())
        self.client = httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url="http://t")

    def request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        return self.runner.run(self.client.request(method, path, **kw))

    def close(self) -> None:
        self.runner.run(self.client.aclose())
        self.runner.run(self.lifespan.__aexit__(None, None, None))
        self.runner.close()


@pytest.fixture(scope="module")
def harness() -> Iterator[Harness]:
    h = Harness()
    yield h
    h.close()


def check(resp: httpx.Response, allowed: set[int]) -> None:
    assert resp.status_code < 500, resp.text
    assert resp.status_code in allowed, (resp.status_code, resp.text)
    if resp.status_code >= 400:
        assert isinstance(resp.json().get("error"), str)


@PROPERTY_SETTINGS
@given(body=request_bodies)
def test_init_with_any_fields_never_fails_the_server(harness: Harness, body: dict[str, Any]) -> None:
    resp = harness.request("POST", "/v1/rollout/init", json=body, headers=AUTH)
    check(resp, {202, 409, 413, 422, 429})  # 409: a reused rollout id with another body
    if resp.status_code == 202:
        assert resp.json()["tools"][0]["function"]["name"] == "add"


@PROPERTY_SETTINGS
@given(body=near_valid_bodies())
def test_near_valid_inits_are_admitted_or_rejected_cleanly(harness: Harness, body: dict[str, Any]) -> None:
    resp = harness.request("POST", "/v1/rollout/init", json=body, headers=AUTH)
    check(resp, {202, 409, 413, 422, 429})
    if resp.status_code == 202:  # a duplicate gets the very same answer
        again = harness.request("POST", "/v1/rollout/init", json=body, headers=AUTH)
        assert (again.status_code, again.json()) == (202, resp.json())


@PROPERTY_SETTINGS
@given(body=json_values)
def test_init_with_any_json_never_fails_the_server(harness: Harness, body: Any) -> None:
    check(harness.request("POST", "/v1/rollout/init", json=body, headers=AUTH), {413, 422})


@PROPERTY_SETTINGS
@given(raw=st.binary(max_size=300), content_type=st.sampled_from(
    ["application/json", "text/plain", "", "application/x-www-form-urlencoded", "application/vnd+json"]))
def test_init_with_any_bytes_never_fails_the_server(harness: Harness, raw: bytes, content_type: str) -> None:
    headers = {**AUTH, "content-type": content_type} if content_type else AUTH
    resp = harness.request("POST", "/v1/rollout/init", content=raw, headers=headers)
    check(resp, {202, 400, 409, 413, 422, 429})


@PROPERTY_SETTINGS
@given(token=st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=60))
def test_any_authorization_header_is_401_403_or_accepted(harness: Harness, token: str) -> None:
    resp = harness.request("GET", "/health", headers={"Authorization": token})
    stripped = token.strip()
    bare = stripped[7:].strip() if stripped[:7].lower() == "bearer " else stripped
    if not stripped:
        assert resp.status_code == 401
    elif bare == KEY:
        assert resp.status_code == 200
    else:
        assert resp.status_code == 403


@PROPERTY_SETTINGS
@given(method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"]),
       path=st.lists(st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126,
                                                     exclude_characters="?#/%"), min_size=1, max_size=8),
                     max_size=4))
def test_any_route_and_method_never_fails_the_server(harness: Harness, method: str, path: list[str]) -> None:
    url = "/" + "/".join(path)
    for prefix in ("", "/v1/rollout"):
        resp = harness.request(method, prefix + url, headers=AUTH)
        assert resp.status_code < 500, (method, prefix + url, resp.text)


def test_openapi_spec_is_served_and_describes_the_init(harness: Harness) -> None:
    spec = harness.request("GET", "/openapi.json", headers=AUTH).json()
    init = spec["paths"]["/v1/rollout/init"]["post"]
    assert set(init["responses"]) >= {"202", "400", "401", "403", "408", "409", "413", "422", "429", "503"}
    assert json.dumps(spec)  # plain JSON
