"""What a run folder may decide when the run is resumed: nothing but where to pick up.

A run folder is data, and a copied or crafted one is hostile data. ``osmosis train resume``
therefore trusts only what the user controls:

- the workspace is the one the command runs in; the root the folder records must name it (a
  folder that records none is refused, not waved through);
- the config is the user's own file (the one the run was submitted with, inside this
  workspace), read again; the folder's snapshot is only compared with it, and any difference
  (a path, ``[cluster]``, ``[remote]``, an ``[env]`` name) is refused, naming the field;
- every path in that config is relative and stays inside the workspace (links resolved);
- the secrets handed to the worker are the values the user's file holds, for the names it
  holds, never values looked up for names the snapshot lists;
- the folder the worker will write into holds only plain files and folders: no link to be
  written through, no FIFO to block on (:func:`~osmosis_ai.safe_io.planted_entries`).

What the folder still decides: the checkpoint to continue from, and its own step counters.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from osmosis_ai.config import redact_config, secret_values
from osmosis_ai.errors import ConfigError, UnreadableFileError
from osmosis_ai.safe_io import planted_entries, read_toml

__all__ = ["confined_path_errors", "resume_secrets"]


def _read_toml(path: Path, what: str, *, under: Path | None = None) -> dict[str, Any]:
    """A TOML file through the safe reader (regular file, size and depth caps)."""
    try:
        return read_toml(path, under=under, follow=under is None)[1]
    except UnreadableFileError as exc:
        raise ConfigError(f"{what}: {exc}") from None


def _check_workspace(run_id: str, recorded: object, workspace: Path) -> None:
    if recorded is None:
        raise ConfigError(
            f"run {run_id} records no workspace_root in its status.json, so nothing says which "
            f"workspace's code it runs; it is not resumed (a folder from another place, or "
            f"crafted). Submit its config again instead"
        )
    if not isinstance(recorded, str) or Path(recorded).resolve() != workspace.resolve():
        raise ConfigError(
            f"run {run_id} was submitted from the workspace {recorded}, but this command "
            f"runs in {workspace}; a resumed run only runs the code of the workspace it came "
            f"from: cd {recorded} and resume there (or submit its config again here)"
        )


def _user_config(run_id: str, recorded: object, workspace: Path) -> Path:
    """The config file the run was submitted with: inside this workspace, still there."""
    if not isinstance(recorded, str) or not recorded:
        raise ConfigError(
            f"run {run_id} records no config file it was submitted with; resume re-reads that "
            "file and compares the run's snapshot with it. Submit the config again instead"
        )
    path = Path(recorded)
    path = path if path.is_absolute() else workspace / path
    root = workspace.resolve()
    if not path.resolve().is_relative_to(root):
        raise ConfigError(
            f"run {run_id} was submitted with {recorded}, which is outside this workspace "
            f"{root}; resume only takes its settings and secrets from a config of this "
            "workspace. Submit the config again instead"
        )
    if not path.is_file():
        raise ConfigError(
            f"run {run_id} was submitted with {path}, which is gone; resume re-reads the config "
            "a run was submitted with (its settings and secrets come from there, never from the "
            "run folder): restore the file, or submit a config again"
        )
    return path


def _differences(a: Any, b: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Dotted paths where two tables differ, leaf first (a table on one side only is walked
    to its first key, so the message names a field, not a section)."""
    if isinstance(a, Mapping) and b is _MISSING:
        b = {}
    if isinstance(b, Mapping) and a is _MISSING:
        a = {}
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for key in sorted({*a, *b}, key=str):
            yield from _differences(a.get(key, _MISSING), b.get(key, _MISSING), (*prefix, key))
    elif a != b or type(a) is not type(b):
        yield prefix


class _Missing:
    def __repr__(self) -> str:
        return "(not set)"


_MISSING = _Missing()


def _field(path: tuple[str, ...]) -> str:
    if len(path) == 1:
        return f"[{path[0]}]"
    return f"[{'.'.join(path[:-1])}].{path[-1]}"


def _get(data: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(data, Mapping) or key not in data:
            return _MISSING
        data = data[key]
    return data


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def confined_path_errors(config: Any, workspace: Path) -> list[str]:
    """Every path of a training config that a resumed run may not use: absolute, ``~``, or
    resolving (links followed) outside ``workspace``. One ``[section].key = 'value': why`` each.

    The base model (``[experiment].model_path``) is not a path of the workspace (a Hub id or a
    model folder anywhere); it comes from the user's own config like every other setting.
    """
    root = workspace.resolve()
    found: list[tuple[str, str | None]] = [
        ("[experiment].dataset", config.experiment.dataset),
        ("[checkpoints].output_dir", config.checkpoints.output_dir),
    ]
    if config.warm_start is not None:
        found.append(("[warm_start].dataset", config.warm_start.dataset))
    heldout = config.heldout
    if heldout is not None:
        found.append(("[heldout].eval_config", heldout.eval_config))
        found.append(("[heldout].dataset", heldout.dataset))
        named = getattr(heldout, "datasets", None) or {}
        found += [(f"[heldout.datasets].{k}", v) for k, v in named.items()]
    errors = []
    for field, value in found:
        if value is None:
            continue
        if value.startswith("~") or Path(value).is_absolute():
            errors.append(f"{field} = {value!r}: an absolute path")
        elif not (root / value).resolve().is_relative_to(root):
            errors.append(f"{field} = {value!r}: resolves outside the workspace {root}")
    return errors


_NOT_WALKED = ("artifacts", "code")
"""Run-folder children whose contents the worker does not write itself: the rollouts' own
files, and the pinned code (checked file by file against its commit when loaded)."""


def _check_plain(run: Any) -> None:
    planted = planted_entries(Path(run.path), skip=_NOT_WALKED)
    if planted:
        raise ConfigError(
            f"run {run.run_id}: its folder {run.path} holds {', '.join(planted)}, a link or "
            "special file (FIFO, socket, device); the resumed worker would write through it. "
            "Osmosis writes only plain files and folders there: remove them (a crafted or "
            "altered folder), or submit the config again as a new run"
        )


def resume_secrets(run: Any, status: Mapping[str, Any], workspace: Path) -> dict[str, Any]:
    """Check a run folder against the user's own config before it is resumed; return the
    secrets to hand the worker (the values the user's file holds, by dotted path).

    Args:
        run: the run (:class:`RunDir`: its ``run_id`` and ``config_file`` snapshot).
        status: the run's ``status.json`` (untrusted: only compared).
        workspace: the workspace the command runs in.

    Raises:
        ConfigError: the folder names no or another workspace, or holds a link or special
            file (:func:`~osmosis_ai.safe_io.planted_entries`); the config it was submitted
            with is gone, outside the workspace or differs from the snapshot (naming the first
            differing field); a path leaves the workspace; a ``[secrets].required`` name is
            not set. Each says how to go on.
    """
    from osmosis_ai.config import load_training_config

    _check_workspace(run.run_id, status.get("workspace_root"), workspace)
    _check_plain(run)
    source = _user_config(run.run_id, status.get("config_path"), workspace)
    user = _read_toml(source, "the config")
    snapshot = _read_toml(
        run.config_file, f"run {run.run_id}'s config snapshot", under=Path(run.path)
    )
    mine = redact_config(user)
    path = next(_differences(snapshot, mine), None)
    if path is not None:
        raise ConfigError(
            f"run {run.run_id}: {_field(path)} is {_shown(_get(snapshot, path))} in the run's "
            f"config snapshot but {_shown(_get(mine, path))} in {source}, the config it was "
            "submitted with; a resumed run takes every setting from your config, never from "
            "the run folder. Restore the value (or submit the config again as a new run)"
        )
    config = load_training_config(source)
    errors = confined_path_errors(config, workspace)
    if errors:
        raise ConfigError(
            f"{source}: a resumed run only uses paths inside its workspace: "
            + "; ".join(errors)
            + ". Give paths relative to the workspace root (or submit the config again: a new "
            "run may use them)"
        )
    missing = config.missing_secrets()
    if missing:
        raise ConfigError(
            f"{source}: [secrets].required names {', '.join(missing)}, which are not set in "
            "the environment; export them, then resume again"
        )
    return secret_values(user)
