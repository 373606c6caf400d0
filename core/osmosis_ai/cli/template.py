"""``osmosis template list | create``: scaffold a rollout, its configs and a small dataset."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from osmosis_ai.console import state

if TYPE_CHECKING:
    from osmosis_ai.templates import CreatedScaffold

__all__ = ["print_created", "register"]

DEFAULT_TEMPLATE = "single-call"

template_app = typer.Typer(
    name="template",
    help="Scaffold a rollout from a template (main.py, configs, a small dataset).",
    no_args_is_help=True,
)


@template_app.command("list")
def list_command(
    json_out: Annotated[
        bool, typer.Option("--json", help="Print JSON instead of a table.")
    ] = False,
) -> None:
    """List the templates `osmosis template create` can use."""
    from rich.table import Table

    from osmosis_ai.templates import list_templates

    templates = list_templates()
    if json_out:
        state.emit_json(
            [
                {
                    "name": t.name,
                    "description": t.description,
                    "requires": list(t.requires),
                    "files": sorted(t.files.values()),
                }
                for t in templates
            ]
        )
        return
    table = Table(title="osmosis templates", title_justify="left")
    table.add_column("template", style="bold cyan")
    table.add_column("description")
    table.add_column("extras")
    for t in templates:
        table.add_row(t.name, t.description, ", ".join(t.requires) or "-")
    state.console.print(table)
    state.console.print(
        "Create one with: [bold]osmosis template create NAME --template TEMPLATE[/]"
    )


@template_app.command("create")
def create_command(
    name: Annotated[
        str, typer.Argument(help="Rollout name: lowercase letters, digits, '_' or '-'.")
    ],
    template: Annotated[
        str, typer.Option("--template", "-t", help="Template to use (see 'osmosis template list').")
    ] = DEFAULT_TEMPLATE,
    force: Annotated[
        bool, typer.Option("--force", help="Overwrite files that already exist.")
    ] = False,
    workspace: Annotated[
        Path, typer.Option("--dir", "-d", help="Workspace folder to write into (default: current).")
    ] = Path("."),
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")] = False,
) -> None:
    """Write rollouts/NAME/, configs/eval/NAME.toml, configs/training/NAME.toml and data/NAME.jsonl."""
    from osmosis_ai.templates import create_from_template

    print_created(create_from_template(template, name, workspace, force=force), json_out)


def print_created(result: CreatedScaffold, json_out: bool) -> None:
    """What a scaffold wrote and what to do next (``template create``, ``rollout init``,
    ``template apply``)."""
    if json_out:
        state.emit_json(
            {
                "template": result.template.name,
                "name": result.name,
                "workspace": str(result.workspace),
                "written": result.written,
                "overwritten": result.overwritten,
                "setup": list(result.template.setup),
                "next_steps": result.next_steps,
            }
        )
        return
    console = state.console
    console.print(
        f"[green]Created rollout[/] [bold]{result.name}[/] from template "
        f"[bold]{result.template.name}[/] in {result.workspace}"
    )
    for rel in result.written:
        console.print(f"  [green]+[/] {rel}")
    for rel in result.overwritten:
        console.print(f"  [yellow]~[/] {rel} (overwritten)")
    if result.template.requires:
        extras = ",".join(result.template.requires)
        console.print(f'This rollout needs: pip install "osmosis-ai[{extras}]"', markup=False)
    if result.template.setup:
        console.print("Before the next steps (the embedded model runs on the trainer extra):")
        for step in result.template.setup:
            console.print(f"  {step}", markup=False)
    if result.next_steps:
        console.print("Next:")
        for step in result.next_steps:
            console.print(f"  [bold]{step}[/]")


def register(app: typer.Typer) -> None:
    """Add the ``template`` command group to the root app."""
    app.add_typer(template_app, name="template")
