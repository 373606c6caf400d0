"""``eval run`` flag errors as one line, and the command an interrupted run prints."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from osmosis_ai.cli.eval import _child_args, _continue_command
from osmosis_ai.eval import EvalOptions

from .conftest import RunCli


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--rows", "1,x"), "--rows '1,x': 'x' is not a row number or range"),
        (("--rows", "9-3"), "range '9-3' runs backwards"),
        (("--name", "a/b"), "--name 'a/b': use letters"),
        (("--fresh",), "--fresh starts a named run over"),
        (("--retry-failed", "--name", "new"), "--retry-failed re-runs the failed samples"),
        (("--dataset-file", "nope.jsonl"), "--dataset-file nope.jsonl does not exist"),
        (("--model", "a", "--model", "b", "--model", "c"), "--model given more than twice"),
        (("--model", "a", "--model", "b", "--baseline"), "either --baseline or a second"),
    ],
)
def test_bad_flags_are_one_line(
    run_cli: RunCli,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    args: tuple[str, ...],
    message: str,
) -> None:
    assert run_cli("template", "create", "calc", "--dir", tmp_path).code == 0
    monkeypatch.chdir(tmp_path)
    res = run_cli("eval", "run", "configs/eval/calc.toml", *args)
    assert res.code == 1
    assert message in res.err and "Traceback" not in res.err
    assert len(res.err.strip().splitlines()) == 1


def _plan(tmp_path: Path) -> Any:
    return SimpleNamespace(config_path=tmp_path / "c.toml", run_dir=tmp_path / "runs/x")


def test_an_unnamed_run_continues_with_resume_and_its_folder(tmp_path: Path) -> None:
    args = _child_args(
        EvalOptions(limit=5, model="calc:best", rows="1-3"), ["calc:best"], baseline=True
    )
    cmd = _continue_command(_plan(tmp_path), args)
    assert cmd == (
        f"osmosis eval run {tmp_path / 'c.toml'} --limit 5 --rows 1-3 --model calc:best "
        f"--baseline --resume --output {tmp_path / 'runs/x'}"
    )


def test_a_named_run_continues_with_the_same_command(tmp_path: Path) -> None:
    args = _child_args(EvalOptions(name="nightly", fresh=True), [], baseline=False)
    cmd = _continue_command(_plan(tmp_path), args)
    assert cmd == f"osmosis eval run {tmp_path / 'c.toml'} --name nightly"
