"""Every help text reaches the terminal as written: a config section such as ``[secrets]`` in an
option's help is text, not a rich style tag, and a command's first paragraph is one line in its
group's listing."""

from __future__ import annotations

from typing import Any

import pytest
import typer

from osmosis_ai.cli._app import app

from .conftest import RunCli

_PLATFORM = "(osmosis-ai 0.3 platform command)"
"""The 0.3 platform commands answer every call, --help too, with where their job is done here."""


def _flat(text: str) -> str:
    return " ".join(text.replace("│", " ").split())


def _commands() -> list[tuple[tuple[str, ...], Any]]:
    """(path, click command) for every visible command, from the unescaped tree typer builds."""
    found: list[tuple[tuple[str, ...], Any]] = []
    todo: list[tuple[tuple[str, ...], Any]] = [((), typer.main.get_command(app))]
    while todo:
        path, cmd = todo.pop()
        found.append((path, cmd))
        for name, sub in getattr(cmd, "commands", {}).items():
            if not sub.hidden:
                todo.append(((*path, name), sub))
    return found


def _first_paragraph(text: str) -> str:
    return _flat(text.strip().split("\n\n")[0])


def test_the_tree_has_commands_with_bracketed_help() -> None:
    # The check below means something only while some help text holds a section name.
    texts = [p.help or "" for _, c in _commands() for p in c.params if hasattr(p, "help")]
    assert len(_commands()) > 30
    assert any("[secrets]" in t for t in texts)


@pytest.mark.parametrize("path", [p for p, _ in _commands()], ids=lambda p: " ".join(p) or "root")
def test_help_page_shows_every_text_as_written(
    path: tuple[str, ...], run_cli: RunCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # no wrapping: each text is one run of words
    cmd = dict(_commands())[path]
    res = run_cli(*path, "--help")
    if (cmd.help or "").startswith(_PLATFORM):
        assert res.code == 2 and "hosted-platform command" in res.err  # it says where to go
        return
    assert res.code == 0, res.err
    shown = _flat(res.out)
    if cmd.help:
        assert _first_paragraph(cmd.help) in shown
    for param in cmd.params:
        if getattr(param, "help", None) and not getattr(param, "hidden", False):
            assert _flat(param.help) in shown, param.name
    lines = [_flat(line) for line in res.out.splitlines()]
    for name, sub in getattr(cmd, "commands", {}).items():
        if sub.hidden or not sub.help:
            continue
        listed = f"{name} {_first_paragraph(sub.short_help or sub.help)}"
        assert any(line.startswith(listed) for line in lines), listed
