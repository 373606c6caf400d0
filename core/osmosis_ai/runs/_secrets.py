"""A run folder never holds a secret; the worker gets the real values from the command.

``config.toml`` in a run is the submitted config with its secrets redacted
(:func:`osmosis_ai.config.redact_config`; a config without any stays a byte-for-byte copy).
``osmosis train submit`` reads the real values from the user's config file, ``resume`` from that
file again (when it still matches the snapshot) or from the environment, and both hand them to
the worker in one environment variable that the worker removes before any rollout runs.
"""

from __future__ import annotations

import json
import os
import shutil
import tomllib
from pathlib import Path
from typing import Any

from osmosis_ai.config import (
    REDACTED,
    dumps_toml,
    redact_config,
    restore_secrets,
    secret_values,
)
from osmosis_ai.errors import ConfigError

__all__ = [
    "SECRETS_ENV",
    "apply_secrets",
    "resume_secrets",
    "snapshot_secrets",
    "take_secrets",
    "write_config_snapshot",
]

SECRETS_ENV = "_OSMOSIS_RUN_SECRETS"
"""The worker's environment variable carrying the redacted values (JSON, by dotted path)."""

_HEADER = (
    "The training config as submitted, its secrets redacted (values under [env] and keys\n"
    "such as api_key / token / secret / password). The worker gets the real values from the\n"
    "command that starts it, never from this file."
)


def _table(path: Path) -> dict[str, Any] | None:
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError):
        return None


def write_config_snapshot(source: Path, dest: Path) -> None:
    """Copy ``source`` to ``dest``: byte for byte when it holds no secret, else redacted."""
    data = _table(source)
    redacted = redact_config(data) if data is not None else None
    if data is None or redacted == data:
        shutil.copyfile(source, dest)
        return
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    tmp.write_text(dumps_toml(redacted or {}, header=_HEADER), encoding="utf-8")
    os.replace(tmp, dest)


def snapshot_secrets(config_file: Path) -> dict[str, Any]:
    """The values the snapshot of ``config_file`` hides (for ``submit``)."""
    data = _table(config_file)
    return secret_values(data) if data is not None else {}


def _redacted_paths(data: Any, prefix: str = "") -> list[str]:
    if isinstance(data, dict):
        return [p for k, v in data.items() for p in _redacted_paths(v, f"{prefix}{k}.")]
    return [prefix[:-1]] if isinstance(data, str) and REDACTED in data else []


def resume_secrets(snapshot: Path, original: object) -> dict[str, Any]:
    """The real values for a resumed run's redacted snapshot.

    From the config file the run was submitted with (``original``, recorded in the run) when
    it still redacts to the same snapshot (so a changed or foreign file can neither change the
    run's settings nor send its secrets elsewhere); else ``[env]`` values from the environment.

    Raises:
        ConfigError: a redacted value is found in neither, naming each and how to supply it.
    """
    data = _table(snapshot)
    needed = _redacted_paths(data) if data is not None else []
    if data is None or not needed:
        return {}
    source = _table(Path(original)) if isinstance(original, str) and original else None
    if source is not None and redact_config(source) == data:
        return secret_values(source)
    found: dict[str, Any] = {}
    for dotted in needed:
        section, _, name = dotted.partition(".")
        if section == "env" and os.environ.get(name):
            found[dotted] = os.environ[name]
    missing = [p for p in needed if p not in found]
    if missing:
        names = ", ".join(f"[{p.rpartition('.')[0]}].{p.rpartition('.')[2]}" for p in missing)
        raise ConfigError(
            f"{snapshot}: the run's config snapshot has secrets redacted ({names}) and the "
            f"config it was submitted with ({original}) is gone or changed since; export the "
            "[env] names in the environment (and keep other secrets out of the file: "
            "[secrets].required), then resume again"
        )
    return found


def take_secrets() -> dict[str, Any]:
    """In the worker: the values its command handed over, removed from the environment so that
    no rollout or child process inherits them."""
    raw = os.environ.pop(SECRETS_ENV, "")
    try:
        values = json.loads(raw) if raw else {}
    except json.JSONDecodeError:
        return {}
    return values if isinstance(values, dict) else {}


def apply_secrets(snapshot: Path, config: Any, values: dict[str, Any]) -> Any:
    """``config`` (loaded from the redacted ``snapshot``) with the real values put back."""
    if not values:
        return config
    data = _table(snapshot)
    if data is None:
        return config
    restored = type(config).model_validate(restore_secrets(data, values))
    restored._source_path = config._source_path
    restored._workspace_root = config._workspace_root
    return restored
