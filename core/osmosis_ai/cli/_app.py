"""The root typer app. Each command group lives in its own module and registers itself here.

Errors derived from :class:`~osmosis_ai.errors.OsmosisError` print one clear line and exit 1;
``--debug`` shows the traceback instead.

Global flags, as the original osmosis-ai 0.3 CLI has them, anywhere on the line:
``--json`` (the command prints its results as JSON where it has a JSON form, and errors as
``{"error": {"code", "message"}}`` on stderr), ``--plain`` (no colours, no live displays),
``--version``.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import typer

from osmosis_ai.console import quiet_libraries, state
from osmosis_ai.errors import OsmosisError

__all__ = ["app", "main"]

app = typer.Typer(
    name="osmosis",
    help="Train LLM agents with reinforcement learning: scaffold, evaluate, train, serve.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # typer's default differs across its versions (0.18 reads no markup, 0.29 rich markup):
    # one mode for all, every help text escaped for it (see _command).
    rich_markup_mode="rich",
)

# Command modules; each defines ``register(app: typer.Typer) -> None``.
_COMMAND_MODULES = (
    "osmosis_ai.cli.template",
    "osmosis_ai.cli.eval",
    "osmosis_ai.cli.dataset",
    "osmosis_ai.cli.validate",
    "osmosis_ai.cli.doctor",
    "osmosis_ai.cli.train",
    "osmosis_ai.cli.model",
    "osmosis_ai.cli.remote",
    "osmosis_ai.cli.dashboard",
    "osmosis_ai.cli.rollout",
    "osmosis_ai.cli.platform",
)

_FORMAT_FLAGS = ("--json", "--plain")


def _print_version(value: bool) -> None:
    if value:
        from osmosis_ai import __version__

        state.console.print(f"osmosis-ai {__version__}", highlight=False, markup=False)
        raise typer.Exit(0)


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show full tracebacks on errors."),
    json_out: bool = typer.Option(
        False, "--json", help="Print results (and errors) as JSON; anywhere on the line."
    ),
    plain: bool = typer.Option(
        False, "--plain", help="Plain text: no colours, no live progress displays."
    ),
    version: bool = typer.Option(
        False, "--version", "-V", is_eager=True, callback=_print_version,
        help="Print the installed osmosis-ai version and exit.",
    ),
) -> None:
    state.debug = debug
    if json_out:
        _set_format("json")
    if plain:
        _set_format("plain")
    if not debug:
        quiet_libraries()


_output: dict[str, bool] = {"json": False, "plain": False}


def _set_format(kind: str) -> None:
    """``--json`` / ``--plain`` given anywhere: remember it; ``--plain`` swaps the consoles for
    ones without colour or terminal control (progress views then print plain lines)."""
    _output[kind.removeprefix("--")] = True
    if kind.endswith("plain"):
        from osmosis_ai.console import CliConsole

        state.console = CliConsole(highlight=False, no_color=True, force_terminal=False)
        state.err_console = CliConsole(
            stderr=True, highlight=False, no_color=True, force_terminal=False
        )


def json_requested() -> bool:
    """Whether ``--json`` was given on the command line (globally or to the command)."""
    return _output["json"]


def _hoist_format_flags(args: list[str]) -> list[str]:
    """``osmosis --json train list`` and ``osmosis train list --json`` mean the same: the
    format flags are taken out wherever they stand, remembered, and ``--json`` is handed to
    the command that runs when it has a ``--json`` option of its own."""
    if "--" in args:
        head, tail = args[: args.index("--")], args[args.index("--") :]
    else:
        head, tail = args, []
    found = [a for a in head if a in _FORMAT_FLAGS]
    if not found:
        return args
    rest = [a for a in head if a not in _FORMAT_FLAGS]
    for flag in found:
        _set_format(flag)
    if "--json" in found and _leaf_takes_json(rest):
        rest.append("--json")
    return rest + tail


def _leaf_takes_json(args: list[str]) -> bool:
    """Whether the command ``args`` name (``eval list``, ``doctor`` ...) has a ``--json``."""
    command: Any = typer.main.get_command(app)
    for token in args:
        if token.startswith("-"):
            continue
        if token in (getattr(command, "commands", None) or {}):
            command = command.commands[token]
        else:
            break
    return any("--json" in getattr(p, "opts", ()) for p in command.params)


def _register_all() -> None:
    for name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # the module is not written yet
                continue
            raise
        module.register(app)


_register_all()


def _command() -> Any:
    """The click command tree of :data:`app`, its help texts made plain text for typer's rich
    help: there a config section such as ``[secrets]`` reads as a style tag and vanishes, and a
    line break inside a command's first paragraph breaks its line in the group's listing."""
    from rich.markup import escape

    root = typer.main.get_command(app)
    todo = [root]
    while todo:
        cmd = todo.pop()
        if cmd.help:
            cmd.help = escape(cmd.help)
            first = cmd.help.strip().split("\n\n")[0]
            cmd.short_help = escape(cmd.short_help) if cmd.short_help else " ".join(first.split())
        for param in cmd.params:
            text = getattr(param, "help", None)  # options and typer's arguments have one
            if text:
                setattr(param, "help", escape(text))  # noqa: B010
        todo.extend(getattr(cmd, "commands", {}).values())
    return root


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit code (the console script calls ``sys.exit`` on it)."""
    consoles = (state.console, state.err_console)
    try:
        return _main(sys.argv[1:] if argv is None else argv)
    finally:  # --plain swaps them for this invocation only (main() runs in-process in tests)
        state.console, state.err_console = consoles


def _main(args: list[str]) -> int:
    state.debug = "--debug" in args
    _output.update(json=False, plain=False)
    args = _hoist_format_flags(list(args))
    try:
        # Without standalone mode, click returns the code of a ``typer.Exit`` instead of raising.
        rv = _command()(args, standalone_mode=False)
    except OsmosisError as exc:
        if state.debug:
            raise
        _error(type(exc).__name__, str(exc))
        return 1
    except typer.Exit as exc:
        return int(exc.exit_code or 0)
    except typer.Abort:
        state.error("Aborted.")
        return 130
    except KeyboardInterrupt:
        state.error("Interrupted.")
        return 130
    except Exception as exc:  # usage errors (missing argument, unknown option, bad type)
        usage = _usage_error_classes()
        if isinstance(exc, usage):
            if _output["json"]:
                _error("UsageError", exc.format_message())  # type: ignore[attr-defined,unused-ignore]
            else:
                exc.show()  # type: ignore[attr-defined,unused-ignore]  # "Usage: ..." and "Error: ...", no traceback
            return int(getattr(exc, "exit_code", 2))
        raise
    return rv if isinstance(rv, int) else 0


def _error(code: str, message: str) -> None:
    """One error: a line on stderr, or with ``--json`` a JSON object there."""
    if _output["json"]:
        import json

        sys.stderr.write(json.dumps({"error": {"code": code, "message": message}}) + "\n")
        sys.stderr.flush()
    else:
        state.error(message)


def _usage_error_classes() -> tuple[type[Exception], ...]:
    """Click's own exception class, and the one of the click copy newer typer versions
    vendor (``typer._click``): typer raises the latter, so checking click's alone let every
    usage error end in a traceback."""
    import click

    classes: list[type[Exception]] = [click.ClickException]
    try:
        # typer exports no name for its vendored click's exception: its module is the only path.
        from typer._click.exceptions import ClickException as TyperClickException
    except ImportError:  # typer versions that use click itself
        pass
    else:
        classes.append(TyperClickException)
    return tuple(classes)


def _entry() -> None:  # pragma: no cover
    sys.exit(main())
