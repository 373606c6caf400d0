"""The original osmosis-ai 0.3 commands that talk to its hosted platform.

Nothing here is hosted, so each answers with one line saying what to do locally instead, and
exits 2 (``--json``: ``{"error": {"code": "PLATFORM_ONLY", "message": ...}}`` on stderr).
Any arguments the old command took are accepted and ignored, so scripts get the advice, not a
usage error.
"""

from __future__ import annotations

from collections.abc import Callable

import typer

__all__ = ["PLATFORM_ONLY", "register"]

PLATFORM_ONLY: dict[str, str] = {
    "auth": (
        "there is no account to log in to: hosted model keys come from the environment "
        "(export OPENAI_API_KEY=...) or from 'osmosis eval run CONFIG --secrets-file FILE'"
    ),
    "secret": (
        "secrets are never stored: list their names under [secrets] required in the config and "
        "export them, or pass --secrets-file FILE (KEY=VALUE lines) to 'osmosis eval run' or "
        "'osmosis train submit'"
    ),
    "dataset upload": (
        "datasets are read from the workspace: put the file under data/, name it in "
        "[experiment] dataset, and check it with 'osmosis dataset validate FILE'"
    ),
    "benchmark": (
        "benchmark locally with 'osmosis eval run CONFIG --model MODEL' (give --model twice to "
        "compare two models on the same rows, or --baseline for a checkpoint's base model)"
    ),
    "upgrade": "upgrade with your package manager: pip install -U osmosis-ai",
}
"""Command -> what to do locally instead."""

_PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}


def refuse(command: str) -> None:
    """Say what ``osmosis COMMAND`` does here instead, and exit 2."""
    from osmosis_ai.cli._app import _error

    _error(
        "PLATFORM_ONLY",
        f"'osmosis {command}' is a hosted-platform command of osmosis-ai 0.3; here, "
        f"{PLATFORM_ONLY[command]}",
    )
    raise typer.Exit(2)


def _make(command: str) -> Callable[[typer.Context], None]:
    def platform_only(ctx: typer.Context) -> None:
        refuse(command)

    platform_only.__doc__ = f"(osmosis-ai 0.3 platform command) {PLATFORM_ONLY[command]}."
    return platform_only


def register(app: typer.Typer) -> None:
    """Add the platform-only commands; ``dataset upload`` joins the ``dataset`` group there."""
    for command in PLATFORM_ONLY:
        if " " in command:
            continue
        app.command(command, context_settings=_PASS_THROUGH, add_help_option=False)(_make(command))


def add_dataset_upload(dataset_app: typer.Typer) -> None:
    """``osmosis dataset upload``: the platform's upload, answered with the local way."""
    dataset_app.command("upload", context_settings=_PASS_THROUGH, add_help_option=False)(
        _make("dataset upload")
    )
