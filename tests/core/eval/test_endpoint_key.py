"""The gateways that eval and ``osmosis test`` start have a key of their own (issue 27,
item 4): their routes carry it, and a client without it is refused."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import httpx
import pytest

from osmosis_ai.testing import FakeOpenAIServer

pytest.importorskip("fastapi")


def _eval_endpoint(model: str) -> AbstractAsyncContextManager[Any]:
    from osmosis_ai.eval._endpoint import open_policy_endpoint

    return open_policy_endpoint(model, {})


def _test_endpoint(model: str) -> AbstractAsyncContextManager[Any]:
    from osmosis_ai.cli.remote import _open_policy

    return _open_policy(model)


@pytest.mark.parametrize("opener", [_eval_endpoint, _test_endpoint], ids=["eval", "osmosis-test"])
async def test_the_policy_gateway_requires_its_own_key(
    opener: Callable[[str], AbstractAsyncContextManager[Any]],
) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    async with FakeOpenAIServer(script=lambda _req: "4") as model:
        async with opener(f"{model.url}/v1") as gateway, httpx.AsyncClient() as http:
            route = gateway.route("r1", "main")
            assert route.api_key != "osmosis" and len(route.api_key) >= 32
            url = route.base_url + "/chat/completions"
            assert (await http.post(url, json=body)).status_code == 401
            keyed = await http.post(
                url, json=body, headers={"Authorization": f"Bearer {route.api_key}"}
            )
            assert keyed.status_code == 200, keyed.text
            assert keyed.json()["choices"][0]["message"]["content"] == "4"
