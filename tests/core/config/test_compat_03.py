"""Configs written for the original osmosis-ai 0.3: ``[advanced]`` and ``[remote] reward``."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from osmosis_ai.config import load_eval_config, load_training_config
from osmosis_ai.errors import ConfigError, DiscoveryError
from osmosis_ai.rollout.running import (
    describe_reward_source,
    load_remote_grader,
    runner_reward_mode,
)

EXPERIMENT = """\
[experiment]
rollout = "calc"
entrypoint = "main.py"
model_path = "embedded"
dataset = "calc"
"""

GRADER = """\
from osmosis_ai.rollout import Grader


class Exact(Grader):
    async def grade(self, ctx):
        for sample_id in ctx.samples:
            ctx.set_sample_reward(sample_id, 1.0)
"""


@pytest.fixture()
def ws(tmp_path: Path) -> Path:
    for sub in ("configs/eval", "configs/training", "rollouts/calc", "data"):
        (tmp_path / sub).mkdir(parents=True)
    (tmp_path / "data" / "calc.jsonl").write_text('{"user_prompt": "1+1"}\n')
    return tmp_path


def write(ws: Path, body: str, kind: str = "training") -> Path:
    path = ws / "configs" / kind / "x.toml"
    path.write_text(textwrap.dedent(body))
    return path


def test_advanced_is_accepted_and_its_keys_are_named(ws: Path) -> None:
    body = EXPERIMENT + "\n[advanced]\nkl_coef = 0.01\nactor = { ppo_epochs = 2 }\n"
    for kind, load in (("eval", load_eval_config), ("training", load_training_config)):
        config = load(write(ws, body, kind))
        assert config.advanced == {"kl_coef": 0.01, "actor": {"ppo_epochs": 2}}
        assert config.ignored_advanced() == ["actor", "kl_coef"]


def test_a_config_without_advanced_has_nothing_to_ignore(ws: Path) -> None:
    assert load_eval_config(write(ws, EXPERIMENT, "eval")).ignored_advanced() == []


REMOTE = '\n[remote]\nserver_url = "http://127.0.0.1:9000"\n'


def test_remote_reward_defaults_to_auto(ws: Path) -> None:
    config = load_training_config(write(ws, EXPERIMENT + REMOTE))
    assert config.remote is not None and config.remote.reward == "auto"
    assert runner_reward_mode(config) is None  # the server's when sent, else the Grader's


def test_auto_with_a_grader_loads_it_as_the_fallback(ws: Path) -> None:
    (ws / "rollouts" / "calc" / "main.py").write_text(GRADER)
    config = load_training_config(write(ws, EXPERIMENT + REMOTE))
    grader = load_remote_grader(config)
    assert grader is not None and grader[0].__name__ == "Exact"
    assert describe_reward_source(config, grader) == (
        "rewards: the server's when it sends one, else the Grader Exact"
    )


def test_auto_without_a_grader_fails_before_the_run_naming_both_fixes(ws: Path) -> None:
    (ws / "rollouts" / "calc" / "main.py").write_text("x = 1\n")
    path = write(ws, EXPERIMENT + REMOTE)
    config = load_training_config(path)
    with pytest.raises(ConfigError) as info:
        load_remote_grader(config)
    message = str(info.value)
    assert message.startswith(f"{path}:")  # no [remote].reward line: the file itself
    assert "defines no Grader, so nothing is sure to produce a reward" in message
    assert 'set [remote] reward = "server"' in message and "define a Grader in" in message


def test_auto_without_the_entrypoint_file_fails_too(ws: Path) -> None:
    config = load_training_config(write(ws, EXPERIMENT + REMOTE))
    with pytest.raises(ConfigError, match=r"main.py does not exist, so nothing is sure"):
        load_remote_grader(config)


def test_server_needs_no_grader_and_grader_needs_one(ws: Path) -> None:
    (ws / "rollouts" / "calc" / "main.py").write_text("x = 1\n")
    server = load_training_config(write(ws, EXPERIMENT + REMOTE + 'reward = "server"\n'))
    assert load_remote_grader(server) is None
    assert runner_reward_mode(server) == "server"
    graded = load_training_config(write(ws, EXPERIMENT + REMOTE + 'reward = "grader"\n'))
    with pytest.raises(DiscoveryError, match="found none"):
        load_remote_grader(graded)


def test_reward_names_the_line_when_auto_is_written(ws: Path) -> None:
    (ws / "rollouts" / "calc" / "main.py").write_text("x = 1\n")
    path = write(ws, EXPERIMENT + REMOTE + 'reward = "auto"\n')
    with pytest.raises(ConfigError, match=rf"^{path}:9: \[remote\] reward = \"auto\""):
        load_remote_grader(load_training_config(path))
