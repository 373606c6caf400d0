"""What the CLI prints in a terminal and in a pipe: its own lines only, never library bars, and
in a pipe no value broken across lines."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from osmosis_ai.console import CliConsole

from .conftest import RunCli

_CLI = [sys.executable, "-c", "import sys; from osmosis_ai.cli import main; sys.exit(main())"]
_LIBRARY_NOISE = ("Loading weights", "de-quantizing", "it/s]", "FutureWarning", "UserWarning")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TQDM_", "COLUMNS"))}
    env.pop("HF_HUB_DISABLE_PROGRESS_BARS", None)
    env.pop("TRANSFORMERS_VERBOSITY", None)
    return env


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from osmosis_trainer.models import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture
def workspace(run_cli: RunCli, tmp_path: Path) -> Path:
    # A deep folder, so the results path is far longer than 80 columns.
    ws = tmp_path / ("a-rather-long-workspace-folder-name-" * 3) / "ws"
    res = run_cli("template", "create", "calc", "--template", "single-call", "--dir", ws)
    assert res.code == 0, res.err
    return ws


def _eval_args(tiny_model: Path, out: Path) -> list[str]:
    return ["eval", "run", "configs/eval/calc.toml", "--limit", "2", "--model", str(tiny_model),
            "--output", str(out)]  # fmt: skip


def test_a_pipe_gets_whole_lines_and_no_library_bars(workspace: Path, tiny_model: Path) -> None:
    out = workspace / ".osmosis" / ("results-folder-" * 4)
    done = subprocess.run(
        [*_CLI, *_eval_args(tiny_model, out)],
        cwd=workspace,
        env=_env(),
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert f"{out / 'results.jsonl'}" in done.stdout.splitlines()[-1]
    assert all(line == line.rstrip() for line in done.stdout.splitlines())
    for noise in _LIBRARY_NOISE:
        assert noise not in done.stdout and noise not in done.stderr


def test_a_terminal_gets_no_library_bars(workspace: Path, tiny_model: Path) -> None:
    out = workspace / ".osmosis" / "run"
    pid, fd = pty.fork()
    if pid == 0:  # the child: run the CLI with the pseudo-terminal as its stdio
        os.chdir(workspace)
        os.execve(_CLI[0], [*_CLI, *_eval_args(tiny_model, out)], _env())
    chunks: list[bytes] = []
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    _, status = os.waitpid(pid, 0)
    text = b"".join(chunks).decode(errors="replace")
    assert os.waitstatus_to_exitcode(status) == 0, text
    assert "eval calc" in text and "pass rate" in text
    for noise in _LIBRARY_NOISE:
        assert noise not in text


def test_console_wraps_for_a_terminal_but_not_for_a_pipe(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    with (tmp_path / "log").open("w") as f:
        pipe = CliConsole(file=f, highlight=False)
        pipe.print("x" * 300)
        terminal = CliConsole(file=f, force_terminal=True, width=80, highlight=False)
        assert terminal.size.width == 80
        assert pipe.size.width > 300
    assert (tmp_path / "log").read_text().splitlines()[0] == "x" * 300


def test_control_characters_in_printed_data_are_shown_not_sent() -> None:
    """A crafted status or trace must not drive the terminal (retitle, clear, plant a link);
    the console's own styling still reaches a terminal."""
    import io

    out = io.StringIO()
    con = CliConsole(file=out, force_terminal=True, width=120, highlight=False)
    con.print("[bold]run[/] r\x1b[2J\x1b]0;pwned\x07 \r\x9b")  # rich drops BEL and CR
    text = out.getvalue()
    assert "\\x1b[2J" in text and "\\x1b]0;pwned" in text and "\\x9b" in text
    assert "\x1b[1m" in text  # rich's bold: its own escape, kept
    assert "\x1b[2J" not in text and "\x1b]0;" not in text and "\r" not in text
