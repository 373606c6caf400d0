"""``osmosis train submit``'s progress display (live view on a terminal) and its checks
before a worker starts; the charts it draws."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from osmosis_ai.cli._app import main
from tests.e2e.toy_workspace import make_workspace


def test_live_view_on_a_terminal(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rich.console import Console

    from osmosis_ai.console import state
    from osmosis_trainer.models import load_model

    screen = io.StringIO()
    monkeypatch.setattr(state, "console", Console(file=screen, force_terminal=True, width=100))
    eos = int(load_model(str(tiny_model_dir)).tokenizer.eos_token_id)
    config_file = make_workspace(tmp_path / "ws", tiny_model_dir, eos_id=eos, max_steps=2)
    assert main(["train", "submit", str(config_file)]) == 0
    out = screen.getvalue()
    assert "training" in out and "2/2" in out and "reward " in out and "finished" in out
    assert "step 1/2 (" not in out  # the plain-line view is for logs only


def test_bad_config_fails_before_a_run_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "configs" / "training" / "x.toml"
    bad.parent.mkdir(parents=True)
    bad.write_text(
        '[experiment]\nrollout = "nope"\nentrypoint = "main.py"\nmodel_path = "embedded"\n'
        'dataset = "d.jsonl"\n'
    )
    assert main(["train", "submit", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "[experiment].rollout = 'nope'" in err and err.count("\n") == 1
    assert not (tmp_path / "runs").exists()


def test_reward_charts() -> None:
    from osmosis_ai.console import ascii_chart, sparkline

    assert sparkline([0.0, 0.5, 1.0], lo=0.0, hi=1.0) == "▁▅█"
    assert sparkline([2.0, 2.0]) == "▅▅"  # flat data sits in the middle
    assert sparkline([float("nan"), 1.0], lo=0.0, hi=1.0) == " █"
    assert sparkline([]) == ""
    chart = ascii_chart([0.0, 1.0], height=4).splitlines()
    assert len(chart) == 5 and chart[0].startswith("  1.00 ┤") and chart[-2].startswith("  0.00 ┤")
    assert [row[-2:] for row in chart[:4]] == [" █", " █", " █", " █"]
    assert ascii_chart([]) == "reward: no data"
