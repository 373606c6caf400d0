"""A run folder never holds a secret; the worker gets the real values from the command.

``config.toml`` in a run is the submitted config with its secrets redacted
(:func:`osmosis_ai.config.redact_config`; a config without any stays a byte-for-byte copy).
``osmosis train submit`` reads the real values from the user's config file, ``resume`` from that
file again (:func:`osmosis_ai.runs.resume_secrets`: only when the snapshot matches it), and both
write them to the worker's stdin, a pipe read once at start (:data:`SECRETS_FLAG`). Never the
environment: ``/proc/<pid>/environ`` shows a process's starting environment to every process of
the same user, the rollout's tool subprocesses included, for as long as the worker lives.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import IO, Any

from osmosis_ai.config import (
    dumps_toml,
    redact_config,
    restore_secrets,
    secret_values,
)
from osmosis_ai.errors import ConfigError
from osmosis_ai.safe_io import UnreadableFileError, read_toml

__all__ = [
    "ENVIRON_PREFIX",
    "SECRETS_FLAG",
    "apply_secrets",
    "encode_secrets",
    "take_environ",
    "snapshot_secrets",
    "take_secrets",
    "write_config_snapshot",
]

SECRETS_FLAG = "--secrets-stdin"
"""The worker's flag: read the redacted values (one JSON object by dotted path) from stdin."""

ENVIRON_PREFIX = "environ."
"""Keys of the handed-over values that are process environment variables (``--secrets-file``
pairs), not config paths: the worker sets them in its ``os.environ`` for the rollouts."""

_MAX_SECRETS_BYTES = 1 << 20

_HEADER = (
    "The training config as submitted, its secrets redacted (values under [env] and keys\n"
    "such as api_key / token / secret / password). The worker gets the real values from the\n"
    "command that starts it, never from this file."
)


def _table(path: Path) -> dict[str, Any] | None:
    try:
        return read_toml(Path(path), follow=True)[1]
    except UnreadableFileError:
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


def encode_secrets(values: dict[str, Any]) -> bytes:
    """What the command writes to the worker's stdin (see :func:`take_secrets`)."""
    return json.dumps(values).encode("utf-8")


def take_secrets(stream: IO[bytes]) -> dict[str, Any]:
    """In the worker: the values its command wrote to ``stream`` (its stdin), read to the end.

    Raises:
        ConfigError: what arrived is not one JSON object of at most 1 MiB.
    """
    raw = stream.read(_MAX_SECRETS_BYTES + 1)
    try:
        values = json.loads(raw.decode("utf-8")) if raw else {}
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        values = None
    if len(raw) > _MAX_SECRETS_BYTES or not isinstance(values, dict):
        raise ConfigError(
            f"the worker's stdin ({SECRETS_FLAG}) did not hold the run's secrets as one JSON "
            "object; start runs with 'osmosis train submit' or 'osmosis train resume'"
        )
    return values


def take_environ(values: dict[str, Any]) -> list[str]:
    """Move the ``environ.NAME`` entries of ``values`` into ``os.environ`` (the rollouts and
    their tools inherit them from there; ``/proc/<pid>/environ`` keeps showing only what the
    process started with). Returns the names set."""
    names = []
    for key in [k for k in values if k.startswith(ENVIRON_PREFIX)]:
        value = values.pop(key)
        name = key[len(ENVIRON_PREFIX):]
        if name and isinstance(value, str):
            os.environ[name] = value
            names.append(name)
    return names


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
