"""``osmosis validate``: check a rollout before running it.

- ``osmosis validate ENTRYPOINT``: discovery report for a rollout file (``rollouts/x/main.py``),
  a rollout folder (its ``main.py``) or an eval/training config (which also checks the dataset):
  the workflow, the grader and their configs.
- ``osmosis validate -m module:attr``: checks a remote-rollout ``RolloutAgentLoop`` (name,
  tool schemas) through ``osmosis_ai.remote.validate_agent_loop``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from osmosis_ai.console import state
from osmosis_ai.errors import ConfigError

__all__ = ["discovery_report", "register"]


def _describe_class(cls: type | None) -> dict[str, Any] | None:
    if cls is None:
        return None
    # The docstring's first paragraph, as one line: its first line alone cut sentences short.
    first = (cls.__doc__ or "").strip().split("\n\n")[0]
    return {"name": cls.__name__, "module": cls.__module__, "doc": " ".join(first.split())}


def _describe_config(config: Any) -> dict[str, Any] | None:
    if config is None:
        return None
    dump = getattr(config, "model_dump", None)
    fields: dict[str, Any] = {}
    if callable(dump):
        try:
            fields = dump(mode="json")
        except Exception:  # a config holding non-JSON objects (a placeholder model, tools)
            fields = {k: repr(v) for k, v in dump().items()}
    return {"type": type(config).__name__, "fields": fields}


def _config_kind(path: Path) -> str:
    from osmosis_ai.config._load import read_toml

    _text, data = read_toml(path)
    return "training" if "training" in data or "lora" in data else "eval"


def _resolve_target(target: Path) -> tuple[Path, dict[str, Any]]:
    """The entrypoint file to load, and what was learnt on the way (config, dataset)."""
    extra: dict[str, Any] = {}
    if target.is_dir():
        entry = target / "main.py"
        if not entry.is_file():
            raise ConfigError(
                f"{target} is a folder without main.py; pass the entrypoint file itself"
            )
        return entry, extra
    if not target.exists():
        raise ConfigError(
            f"{target} does not exist; pass a rollout file (rollouts/NAME/main.py), a rollout "
            "folder, or a config (configs/eval/NAME.toml)"
        )
    if target.suffix == ".toml":
        from osmosis_ai.config import load_eval_config, load_training_config

        kind = _config_kind(target)
        cfg: Any = load_training_config(target) if kind == "training" else load_eval_config(target)
        extra["config"] = {
            "path": str(target),
            "kind": kind,
            "model_path": cfg.experiment.model_path,
        }
        dataset = cfg.dataset_path()
        extra["dataset"] = _dataset_summary(dataset)
        if cfg.remote is not None:
            extra["_remote_config"] = cfg
            return cfg.entrypoint_path(must_exist=False), extra
        return cfg.entrypoint_path(), extra
    if target.suffix != ".py":
        raise ConfigError(
            f"{target}: expected a .py entrypoint, a rollout folder or a .toml config"
        )
    return target, extra


def _dataset_summary(path: Path) -> dict[str, Any]:
    from osmosis_ai.data import validate_dataset

    report = validate_dataset(path)
    return {
        "path": str(path),
        "ok": report.ok,
        "rows": report.rows,
        "errors": [str(e) for e in report.errors],
        "has_label": report.has_label,
    }


def discovery_report(target: Path) -> dict[str, Any]:
    """Load an entrypoint (or the one a config names) and describe what osmosis found."""
    from osmosis_ai.rollout.running import load_entrypoint

    entry_path, extra = _resolve_target(target)
    remote_config = extra.pop("_remote_config", None)
    if remote_config is not None:
        return _remote_report(remote_config, entry_path, extra)
    entry = load_entrypoint(entry_path)
    warnings: list[str] = []
    if entry.grader_cls is None:
        warnings.append(
            "no Grader in this file: samples get no reward and eval counts them as failed "
            "unless the workflow's samples carry rewards"
        )
    dataset = extra.get("dataset")
    if dataset is not None and not dataset["has_label"] and entry.grader_cls is not None:
        warnings.append("the dataset has no ground_truth column: the grader gets ctx.label = None")
    ok = dataset is None or dataset["ok"]
    return {
        "ok": ok,
        "entrypoint": str(entry_path),
        "workflow": _describe_class(entry.workflow_cls),
        "grader": _describe_class(entry.grader_cls),
        "workflow_config": _describe_config(entry.workflow_config),
        "grader_config": _describe_config(entry.grader_config),
        "backend": type(entry.backend).__name__ if entry.backend is not None else None,
        **extra,
        "warnings": warnings,
    }


def _remote_report(cfg: Any, entry_path: Path, extra: dict[str, Any]) -> dict[str, Any]:
    """A ``[remote]`` config: the workflow runs on the server; say where rewards come from.
    ``reward = "auto"`` (the default) or ``"grader"`` without a Grader fails here (ConfigError
    / DiscoveryError naming the fix), before any training run."""
    from osmosis_ai.rollout.running import describe_reward_source, load_remote_grader

    grader = load_remote_grader(cfg)
    dataset = extra.get("dataset")
    return {
        "ok": dataset is None or dataset["ok"],
        "entrypoint": str(entry_path),
        "remote": {
            "server_url": cfg.remote.server_url,
            "reward": cfg.remote.reward,
            "rewards": describe_reward_source(cfg, grader),
        },
        "workflow": None,
        "grader": _describe_class(grader[0]) if grader else None,
        "workflow_config": None,
        "grader_config": _describe_config(grader[1]) if grader else None,
        **extra,
        "warnings": [],
    }


def _doc(doc: str) -> str:
    from rich.markup import escape

    return f" [dim]- {escape(doc)}[/]" if doc else ""


def _print_discovery(report: dict[str, Any]) -> None:
    from rich.markup import escape

    console = state.console
    mark = "[green]ok[/]" if report["ok"] else "[red]invalid[/]"
    console.print(f"{mark} {escape(report['entrypoint'])}")
    wf, gr = report["workflow"], report["grader"]
    remote = report.get("remote")
    if remote is not None:
        console.print(f"  workflow: on the remote server {escape(remote['server_url'])}")
        console.print(f"  {escape(remote['rewards'])}")
    else:
        console.print(f"  workflow: [bold]{wf['name']}[/]{_doc(wf['doc'])}")
    if gr is None:
        if remote is None:
            console.print("  grader:   [yellow]none[/]")
    else:
        console.print(f"  grader:   [bold]{gr['name']}[/]{_doc(gr['doc'])}")
    if report.get("backend"):
        console.print(
            f"  served by: {report['backend']} (an osmosis-ai 0.3 entrypoint: osmosis runs its "
            "workflow and grader itself; main() is not run)"
        )
    for key, label in (("workflow_config", "workflow config"), ("grader_config", "grader config")):
        cfg = report.get(key)
        if cfg is not None:
            fields = ", ".join(f"{k}={v!r}" for k, v in cfg["fields"].items())
            console.print(f"  {label}: {cfg['type']}({escape(fields)})")
    if "config" in report:
        c = report["config"]
        console.print(
            f"  config:   {escape(c['path'])} ({c['kind']}, model {escape(c['model_path'])})"
        )
    if "dataset" in report:
        d = report["dataset"]
        state_ = "ok" if d["ok"] else "[red]invalid[/]"
        console.print(f"  dataset:  {escape(d['path'])}: {d['rows']} rows, {state_}")
        for err in d["errors"]:
            console.print(f"    {escape(err)}")
    for w in report["warnings"]:
        state.warn(w)


def _validate_module(spec: str, verbose: bool, json_out: bool) -> bool:
    from osmosis_ai.rollout import remote

    validate = getattr(remote, "validate_agent_loop", None)
    if validate is None:
        raise ConfigError(
            "validate -m needs osmosis_ai.remote.validate_agent_loop, which this "
            "installation does not provide"
        )
    result = validate(spec)
    ok = bool(getattr(result, "ok", getattr(result, "valid", True)))
    if json_out:
        dump = getattr(result, "model_dump", None)
        payload = dump(mode="json") if callable(dump) else {"report": str(result)}
        state.emit_json({**payload, "ok": ok})
        return ok
    lines = getattr(result, "lines", None)
    text = lines(verbose=verbose) if callable(lines) else [str(result)]
    for line in text if isinstance(text, list) else [text]:
        state.console.print(line, markup=False, soft_wrap=True)
    return ok


def validate_command(
    target: Annotated[
        Path | None, typer.Argument(help="Rollout file, rollout folder, or eval/training config.")
    ] = None,
    module: Annotated[
        str | None,
        typer.Option("--module", "-m", help="A remote-rollout agent loop as module:attr."),
    ] = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="More detail (with -m).")
    ] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Discover a rollout's workflow, grader and configs (or check a remote agent loop)."""
    if (target is None) == (module is None):
        raise ConfigError(
            "pass exactly one of ENTRYPOINT (e.g. rollouts/calc/main.py) or -m module:attr"
        )
    if module is not None:
        if not _validate_module(module, verbose, json_out):
            raise typer.Exit(1)
        return
    assert target is not None
    report = discovery_report(target)
    if json_out:
        state.emit_json(report)
    else:
        _print_discovery(report)
    if not report["ok"]:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add the ``validate`` command to the root app."""
    app.command("validate")(validate_command)
