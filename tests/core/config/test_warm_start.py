"""``[warm_start]``: defaults, validation, the dataset path and ``max_steps = 0``."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from osmosis_ai.config import WarmStartConfig, load_training_config
from osmosis_ai.errors import ConfigError

EXPERIMENT = """\
[experiment]
rollout = "calc"
entrypoint = "main.py"
model_path = "m"
dataset = "calc"
"""


@pytest.fixture()
def ws(tmp_path: Path) -> Path:
    (tmp_path / "configs" / "training").mkdir(parents=True)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "demos.jsonl").write_text("{}\n")
    return tmp_path


def cfg(ws: Path, body: str) -> Path:
    path = ws / "configs" / "training" / "x.toml"
    path.write_text(EXPERIMENT + textwrap.dedent(body))
    return path


def test_absent_by_default(ws: Path) -> None:
    c = load_training_config(cfg(ws, ""))
    assert c.warm_start is None
    assert c.warm_start_dataset_path() is None


def test_values_and_defaults(ws: Path) -> None:
    c = load_training_config(
        cfg(ws, '[warm_start]\ndataset = "data/demos.jsonl"\nepochs = 3\nlr = 1e-3\n')
    )
    w = c.warm_start
    assert isinstance(w, WarmStartConfig)
    assert (w.epochs, w.lr, w.batch_size, w.on_bad_row) == (3, 1e-3, 8, "error")
    assert c.warm_start_dataset_path() == ws / "data" / "demos.jsonl"
    # every field is documented (the config package is the one description of settings)
    assert all(f.description for f in WarmStartConfig.model_fields.values())


def test_missing_dataset_names_file_line_and_workspace(ws: Path) -> None:
    path = cfg(ws, '\n[warm_start]\ndataset = "data/nope.jsonl"\n')
    c = load_training_config(path)
    with pytest.raises(ConfigError) as err:
        c.warm_start_dataset_path()
    msg = str(err.value)
    assert f"{path.resolve()}:8:" in msg
    assert "nope.jsonl" in msg and "demos.jsonl" in msg and str(ws) in msg


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("epochs = 0", "[warm_start].epochs"),
        ("lr = -1.0", "[warm_start].lr"),
        ('on_bad_row = "ignore"', "[warm_start].on_bad_row"),
        ("max_token = 10", "did you mean 'max_tokens'"),
    ],
)
def test_bad_values_are_located(ws: Path, body: str, needle: str) -> None:
    path = cfg(ws, f'[warm_start]\ndataset = "data/demos.jsonl"\n{body}\n')
    with pytest.raises(ConfigError) as err:
        load_training_config(path)
    assert needle in str(err.value) and f"{path}:8:" in str(err.value)


def test_dataset_is_required(ws: Path) -> None:
    with pytest.raises(ConfigError, match=r"\[warm_start\]\.dataset is required"):
        load_training_config(cfg(ws, "[warm_start]\nepochs = 1\n"))


def test_zero_steps_need_a_warm_start(ws: Path) -> None:
    with pytest.raises(ConfigError, match=r"max_steps = 0 .*\[warm_start\]"):
        load_training_config(cfg(ws, "[training]\nmax_steps = 0\n"))
    c = load_training_config(
        cfg(ws, '[training]\nmax_steps = 0\n[warm_start]\ndataset = "data/demos.jsonl"\n')
    )
    assert c.training.max_steps == 0
