"""The package surface: light import, the placeholder, and missing-extra errors."""

from __future__ import annotations

import copy
import pickle
import subprocess
import sys

import pytest

import osmosis_integrations
from osmosis_ai.errors import MissingExtraError, NotInRolloutError
from osmosis_ai.testing import FakeOpenAIServer
from osmosis_integrations import OsmosisRolloutModel
from tests.integrations._helpers import in_rollout


def test_importing_the_package_imports_no_framework() -> None:
    code = (
        "import sys, osmosis_integrations\n"
        "from osmosis_integrations import OsmosisRolloutModel\n"
        "heavy = {'strands', 'agents', 'openai', 'litellm', 'torch'} & set(sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_public_api() -> None:
    from osmosis_integrations import OsmosisAgent, OsmosisStrandsAgent  # noqa: F401

    assert {"OsmosisRolloutModel", "OsmosisStrandsAgent", "OsmosisAgent"} <= set(
        osmosis_integrations.__all__
    )
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = osmosis_integrations.Nope  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("name", "module", "extra"),
    [
        ("OsmosisStrandsAgent", "strands", "strands"),
        ("OsmosisAgent", "agents", "openai-agents"),
        ("osmosis_run_config", "agents", "openai-agents"),
    ],
)
def test_a_missing_framework_names_the_pip_install(
    monkeypatch: pytest.MonkeyPatch, name: str, module: str, extra: str
) -> None:
    adapter = osmosis_integrations._LAZY[name][0]
    monkeypatch.setitem(sys.modules, module, None)  # makes `import <module>` fail
    monkeypatch.delitem(sys.modules, adapter, raising=False)
    monkeypatch.delitem(vars(osmosis_integrations), name, raising=False)
    with pytest.raises(MissingExtraError) as err:
        getattr(osmosis_integrations, name)
    assert f'pip install "osmosis-ai[{extra}]"' in str(err.value)
    assert err.value.extra == extra and name in str(err.value)
    with pytest.raises(ImportError, match=extra):
        exec(f"from osmosis_integrations import {name}", {})


def test_placeholder_keeps_params_and_copies_cleanly() -> None:
    model = OsmosisRolloutModel(temperature=0.5, max_tokens=32, extra_body={"k": [1]})
    assert model.params == {"temperature": 0.5, "max_tokens": 32, "extra_body": {"k": [1]}}
    assert not model.stream and OsmosisRolloutModel(stream=True).stream
    clone = copy.deepcopy(model)
    assert clone == model and clone.params["extra_body"] is not model.params["extra_body"]
    assert pickle.loads(pickle.dumps(model)) == model
    assert model.copy() == model
    assert (
        repr(model) == "OsmosisRolloutModel(temperature=0.5, max_tokens=32, extra_body={'k': [1]})"
    )
    assert model != OsmosisRolloutModel()


@pytest.mark.parametrize("key", ["model", "model_id", "base_url", "api_base", "api_key"])
def test_placeholder_refuses_to_name_the_model_or_endpoint(key: str) -> None:
    with pytest.raises(TypeError, match=f"Remove {key}="):
        OsmosisRolloutModel(**{key: "x"})


async def test_placeholder_resolves_only_inside_a_rollout() -> None:
    with pytest.raises(NotInRolloutError, match="osmosis eval run"):
        OsmosisRolloutModel().route()
    async with FakeOpenAIServer() as server:
        with in_rollout(server, "r-42"):
            route = OsmosisRolloutModel().route("agent-x")
    assert route.base_url.endswith("/rollouts/r-42/samples/agent-x/v1")


def test_placeholder_misuse_explains_itself() -> None:
    with pytest.raises(AttributeError, match=r"OsmosisAgent\(model=OsmosisRolloutModel"):
        _ = OsmosisRolloutModel().get_response
