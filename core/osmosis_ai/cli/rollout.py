"""``osmosis rollout init NAME`` / ``rollout list``, and ``osmosis template apply RECIPE``: the
original osmosis-ai 0.3 scaffolding commands, mapped onto our templates.

- ``rollout init NAME`` writes what ``template create NAME`` writes (``rollouts/NAME/``, both
  configs, a small dataset) from the ``single-call`` template, or ``--template``.
- ``rollout list`` lists ``rollouts/*`` of the workspace with their entrypoint (the file their
  configs name), the configs that name them, and their other Python files.
- ``template apply RECIPE`` takes the 0.3 starter recipes (``multiply-local-strands``,
  ``multiply-local-openai``, ``multiply-harbor-strands``; the rollout and its configs take the
  recipe's name) or any of our template names (the rollout is named after the template).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer

from osmosis_ai.console import state
from osmosis_ai.errors import ConfigError

__all__ = ["RECIPES", "RolloutEntry", "list_rollouts", "recipe_template", "register"]

RECIPES: dict[str, tuple[str, str]] = {
    "multiply-local-strands": ("strands", "multiply-local-strands"),
    "multiply-local-openai": ("openai-agents", "multiply-local-openai"),
    "multiply-harbor-strands": ("harbor", "multiply-harbor-strands"),
}
"""0.3 workspace-template recipe -> (our template, rollout name). The rollout and its configs
keep the recipe's name, as 0.3 wrote them (``configs/eval/multiply-local-strands.toml``);
``harbor`` is any installed template whose name contains it."""

rollout_app = typer.Typer(
    name="rollout",
    help="Scaffold and list the rollouts of this workspace (the osmosis-ai 0.3 commands).",
    no_args_is_help=True,
)

_Dir = Annotated[
    Path, typer.Option("--dir", "-d", help="Workspace folder (default: the current one).")
]
_Json = Annotated[bool, typer.Option("--json", help="Print JSON.")]


@dataclass
class RolloutEntry:
    """A folder under ``rollouts/`` and what refers to it."""

    name: str
    path: Path
    entrypoints: list[str] = field(default_factory=list)
    """The folder's entrypoints: the files its configs name as ``[experiment] entrypoint``, or,
    when no config names one, ``main.py`` / ``server.py`` if present."""
    configs: list[str] = field(default_factory=list)
    """Configs (relative to the workspace) whose ``[experiment] rollout`` is this folder."""
    other_scripts: list[str] = field(default_factory=list)
    """The folder's other top-level Python files (helpers such as ``make_data.py``)."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "path": str(self.path),
            "entrypoints": self.entrypoints,
            "configs": self.configs,
            "other_scripts": self.other_scripts,
        }


def _config_rollouts(workspace: Path) -> dict[str, list[tuple[str, str | None]]]:
    """rollout name -> (config, the entrypoint it names) for each config naming it (configs that
    do not parse are skipped)."""
    from osmosis_ai.config._load import read_toml

    found: dict[str, list[tuple[str, str | None]]] = {}
    for kind in ("eval", "training"):
        for path in sorted((workspace / "configs" / kind).glob("*.toml")):
            try:
                _text, data = read_toml(path)
            except ConfigError:
                continue
            experiment = data.get("experiment")
            if not isinstance(experiment, dict):
                continue
            name, entrypoint = experiment.get("rollout"), experiment.get("entrypoint")
            if isinstance(name, str):
                found.setdefault(name, []).append(
                    (
                        path.relative_to(workspace).as_posix(),
                        entrypoint if isinstance(entrypoint, str) else None,
                    )
                )
    return found


def list_rollouts(workspace: Path) -> list[RolloutEntry]:
    """The rollouts of ``workspace`` (folders under ``rollouts/``), sorted by name."""
    root = workspace / "rollouts"
    if not root.is_dir():
        return []
    configs = _config_rollouts(workspace)
    entries = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        scripts = sorted(p.name for p in folder.glob("*.py") if p.is_file())
        naming = configs.get(folder.name, [])
        named = [e for e in dict.fromkeys(e for _c, e in naming if e) if e in scripts]
        entrypoints = named or [s for s in ("main.py", "server.py") if s in scripts]
        entries.append(
            RolloutEntry(
                folder.name,
                folder,
                entrypoints,
                [c for c, _e in naming],
                [s for s in scripts if s not in entrypoints],
            )
        )
    return entries


def recipe_template(recipe: str) -> tuple[str, str]:
    """``(template, rollout name)`` for a 0.3 recipe or one of our template names."""
    from osmosis_ai.templates import list_templates

    names = [t.name for t in list_templates()]
    if recipe in names:
        return recipe, recipe
    if recipe not in RECIPES:
        raise ConfigError(
            f"unknown template {recipe!r}: use one of the osmosis-ai 0.3 recipes "
            f"({', '.join(RECIPES)}) or a template of 'osmosis template list' "
            f"({', '.join(names)})"
        )
    template, rollout = RECIPES[recipe]
    if template in names:
        return template, rollout
    matches = [n for n in names if template in n]
    if not matches:
        raise ConfigError(
            f"recipe {recipe!r} needs a '{template}' template, and none is installed "
            f"(templates: {', '.join(names)}); use multiply-local-strands, or update osmosis-ai"
        )
    return matches[0], rollout


def _scaffold(template: str, name: str, workspace: Path, force: bool, json_out: bool) -> None:
    from osmosis_ai.cli.template import print_created
    from osmosis_ai.templates import create_from_template

    print_created(create_from_template(template, name, workspace, force=force), json_out)


@rollout_app.command("init")
def init_command(
    name: Annotated[str, typer.Argument(help="Rollout name (lowercase letters, digits, '-').")],
    template: Annotated[
        str, typer.Option("--template", "-t", help="Template to scaffold from.")
    ] = "single-call",
    force: Annotated[bool, typer.Option("--force", help="Overwrite existing files.")] = False,
    workspace: _Dir = Path("."),
    json_out: _Json = False,
) -> None:
    """Scaffold rollouts/NAME/, configs/eval/NAME.toml, configs/training/NAME.toml, data/."""
    _scaffold(template, name, workspace, force, json_out)


@rollout_app.command("list")
def list_command(workspace: _Dir = Path("."), json_out: _Json = False) -> None:
    """The rollouts of this workspace, their entrypoints and the configs that use them."""
    entries = list_rollouts(workspace.resolve())
    if json_out:
        state.emit_json([e.as_dict() for e in entries])
        return
    if not entries:
        state.console.print(
            f"no rollouts under {workspace.resolve() / 'rollouts'}; create one with "
            "'osmosis rollout init NAME'",
            highlight=False,
            markup=False,
        )
        return
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("rollout", "entrypoint", "configs", "other .py files"):
        table.add_column(column, overflow="fold")
    for e in entries:
        # File names are shown as written (Text), never read as rich markup.
        cells = (e.entrypoints, e.configs, e.other_scripts)
        table.add_row(Text(e.name), *(Text(", ".join(c) or "-") for c in cells))
    state.console.print(table)


def apply_command(
    recipe: Annotated[
        str,
        typer.Argument(help="A 0.3 recipe (multiply-local-strands ...) or a template name."),
    ],
    force: Annotated[bool, typer.Option("--force", help="Overwrite existing files.")] = False,
    workspace: _Dir = Path("."),
    json_out: _Json = False,
) -> None:
    """Copy a starter recipe into the workspace (osmosis-ai 0.3's 'template apply')."""
    template, name = recipe_template(recipe)
    _scaffold(template, name, workspace, force, json_out)


def register(app: typer.Typer) -> None:
    """Add the ``rollout`` group; ``template apply`` joins the ``template`` group."""
    from osmosis_ai.cli.template import template_app

    template_app.command("apply")(apply_command)
    app.add_typer(rollout_app, name="rollout")
