"""``--secrets-file FILE``: ``KEY=VALUE`` lines put into the rollout's environment.

As in the original osmosis-ai 0.3: blank lines and ``#`` comments are skipped, ``export KEY=``
is accepted, one pair of surrounding quotes is dropped, ``-`` reads stdin. Values win over the
environment (they are what the user handed this run), are never printed, and are never written
anywhere: errors name the file and the line number, not the line.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from osmosis_ai.errors import ConfigError

__all__ = ["apply_secrets_file", "read_secrets_file"]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def read_secrets_file(source: str | Path) -> dict[str, str]:
    """The ``KEY=VALUE`` pairs of ``source`` (``"-"``: stdin).

    Raises:
        ConfigError: the file cannot be read, or a line is not ``NAME=value`` (named by its
            number only: every line may be a secret).
    """
    label = "stdin" if str(source) == "-" else str(source)
    try:
        text = sys.stdin.read() if str(source) == "-" else Path(source).read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or type(exc).__name__
        raise ConfigError(f"--secrets-file {label}: cannot read it ({reason})") from None
    values: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        name, sep, value = stripped.partition("=")
        name = name.strip().removeprefix("export ").strip()
        if not sep or not _NAME.match(name):
            raise ConfigError(
                f"--secrets-file {label}:{number}: expected NAME=value (one per line; values "
                "spanning lines are not supported)"
            )
        values[name] = _unquote(value.strip())
    return values


def apply_secrets_file(source: str | Path | None) -> list[str]:
    """Put ``source``'s pairs into ``os.environ`` (inherited by rollout servers and workers);
    returns the names set, sorted. ``None``: nothing to do."""
    if source is None:
        return []
    values = read_secrets_file(source)
    os.environ.update(values)
    return sorted(values)
