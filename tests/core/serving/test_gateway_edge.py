"""What the policy gateway refuses at its edge (issue 27, item 4): a POST that is not JSON
(415; a web page can send ``text/plain`` without a CORS preflight), and strings that are not
Unicode text (lone surrogates: 400 naming the field, never an engine failure)."""

from __future__ import annotations

import logging

import httpx
import pytest

from osmosis_ai.serving import new_api_key
from osmosis_ai.serving.gateway import PolicyGateway
from osmosis_ai.testing import ScriptedEngine

pytest.importorskip("fastapi")

BODY = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'
SCOPED = "/rollouts/r1/samples/main/v1/chat/completions"


@pytest.mark.parametrize("path", ["/v1/chat/completions", SCOPED])
@pytest.mark.parametrize(
    "ctype", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data", None]
)
async def test_posts_that_are_not_json_get_415(path: str, ctype: str | None) -> None:
    engine = ScriptedEngine(["ok"])
    async with PolicyGateway(engine) as gw, httpx.AsyncClient() as c:
        headers = {"content-type": ctype} if ctype else {}
        req = c.build_request("POST", gw.url + path, content=BODY, headers=headers)
        if ctype is None:
            req.headers.pop("content-type", None)
        resp = await c.send(req)
        assert resp.status_code == 415, resp.text
        error = resp.json()["error"]
        assert error["code"] == "unsupported_media_type" and "application/json" in error["message"]
        assert await gw.collect("r1") == {}  # the engine never saw it


async def test_json_with_parameters_is_accepted() -> None:
    async with PolicyGateway(ScriptedEngine(["ok"])) as gw, httpx.AsyncClient() as c:
        resp = await c.post(gw.url + "/v1/chat/completions", content=BODY,
                            headers={"content-type": "Application/JSON; charset=utf-8"})
    assert resp.status_code == 200, resp.text


async def test_mounted_routes_require_json_too() -> None:
    from fastapi import APIRouter

    router = APIRouter()

    async def completed() -> dict[str, bool]:
        return {"ok": True}

    router.add_api_route("/v1/rollout/completed", completed, methods=["POST"])
    async with PolicyGateway(ScriptedEngine([]), extra_routers=[router]) as gw, \
            httpx.AsyncClient() as c:
        plain = await c.post(gw.url + "/v1/rollout/completed", content=b"{}",
                             headers={"content-type": "text/plain"})
        good = await c.post(gw.url + "/v1/rollout/completed", json={})
    assert (plain.status_code, good.status_code) == (415, 200)


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        (rb'"messages": [{"role": "user", "content": "a\ud800b"}]', "messages.0.content"),
        (rb'"messages": [{"role": "user", "content": "\udfff"}]', "messages.0.content"),
        # the raw UTF-8 bytes of a surrogate (json.loads decodes bytes with surrogatepass)
        (b'"messages": [{"role": "user", "content": "\xed\xa0\x80"}]', "messages.0.content"),
        (rb'"messages": [{"role": "user", "content": "hi"}], "stop": ["\ud800"]', "stop.0"),
        (rb'"messages": [{"role": "user", "content": [{"type": "text", "text": "\udc00"}]}]',
         "messages.0.content.0.text"),
        (rb'"messages": [{"role": "user", "content": "hi"}], "metadata": {"\ud800": 1}',
         "metadata.<key>"),
    ],
)
async def test_lone_surrogates_are_400_naming_the_field(
    raw: bytes, param: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    engine = ScriptedEngine(["ok"])
    async with PolicyGateway(engine) as gw, httpx.AsyncClient() as c:
        resp = await c.post(gw.url + SCOPED, content=b'{"model": "m", ' + raw + b"}",
                            headers={"content-type": "application/json"})
        assert resp.status_code == 400, resp.text
        error = resp.json()["error"]
        assert error["param"] == param and "lone surrogate" in error["message"]
        assert await gw.collect("r1") == {}
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_paired_surrogate_escapes_are_text() -> None:
    # JSON writes characters beyond the BMP as a pair of escapes: that is valid text.
    emoji = rb'{"model": "m", "messages": [{"role": "user", "content": "\ud83d\ude00"}]}'
    async with PolicyGateway(ScriptedEngine(["ok"])) as gw, httpx.AsyncClient() as c:
        resp = await c.post(gw.url + SCOPED, content=emoji,
                            headers={"content-type": "application/json"})
        assert resp.status_code == 200, resp.text
        [call] = (await gw.collect("r1"))["main"]
    assert call.request_messages[0]["content"] == "\U0001f600"


def test_new_api_keys_are_random_and_header_safe() -> None:
    keys = {new_api_key() for _ in range(50)}
    assert len(keys) == 50
    for key in keys:
        assert len(key) >= 40 and key.isascii() and " " not in key


async def test_a_client_leaving_mid_body_is_not_a_gateway_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # An agent process stopped by Ctrl-C can drop its connection half-way through a request
    # body; the gateway must note it quietly, not log a traceback, and keep serving.
    from tests.core.serving._disconnect import leave_mid_body

    caplog.set_level(logging.DEBUG, logger="osmosis")
    async with PolicyGateway(ScriptedEngine(["ok"])) as gw, httpx.AsyncClient() as c:
        await leave_mid_body(gw.url, "/v1/chat/completions", b"", BODY[:20], caplog)
        resp = await c.post(gw.url + "/v1/chat/completions", content=BODY,
                            headers={"content-type": "application/json"})
    assert any("disconnected" in r.getMessage() for r in caplog.records)
    assert resp.status_code == 200, resp.text
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
