"""The root typer app. Each command group lives in its own module and registers itself here.

Errors derived from :class:`~osmosis_ai.errors.OsmosisError` print one clear line and exit 1;
``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import importlib
import sys

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
)


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show full tracebacks on errors."),
) -> None:
    state.debug = debug
    if not debug:
        quiet_libraries()


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


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit code (the console script calls ``sys.exit`` on it)."""
    args = sys.argv[1:] if argv is None else argv
    state.debug = "--debug" in args
    try:
        # Without standalone mode, click returns the code of a ``typer.Exit`` instead of raising.
        rv = app(args, standalone_mode=False)
    except OsmosisError as exc:
        if state.debug:
            raise
        state.error(str(exc))
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
            exc.show()  # type: ignore[attr-defined]  # "Usage: ..." and "Error: ...", no traceback
            return int(getattr(exc, "exit_code", 2))
        raise
    return rv if isinstance(rv, int) else 0


def _usage_error_classes() -> tuple[type[Exception], ...]:
    """Click's own exception class, and the one of the click copy newer typer versions
    vendor (``typer._click``): typer raises the latter, so checking click's alone let every
    usage error end in a traceback."""
    import click

    classes: list[type[Exception]] = [click.ClickException]
    try:
        from typer._click.exceptions import ClickException as TyperClickException
    except ImportError:  # typer versions that use click itself
        pass
    else:
        classes.append(TyperClickException)
    return tuple(classes)


def _entry() -> None:  # pragma: no cover
    sys.exit(main())
