"""Where each key of a TOML config file is: line numbers for error messages."""

from __future__ import annotations

import re

__all__ = ["key_lines"]

_HEADER = re.compile(r"^\s*\[\s*([^\[\]]+?)\s*\]\s*(#.*)?$")
_KEY = re.compile(r"""^\s*["']?([A-Za-z0-9_\-]+)["']?\s*=""")


def key_lines(text: str) -> dict[tuple[str, ...], int]:
    """Line numbers (1-based) of section headers and keys: ``("training", "lr") -> 12``."""
    found: dict[tuple[str, ...], int] = {}
    section: tuple[str, ...] = ()
    for number, line in enumerate(text.splitlines(), 1):
        header = _HEADER.match(line)
        if header:
            section = tuple(s.strip().strip("\"'") for s in header.group(1).split("."))
            found.setdefault(section, number)
            continue
        key = _KEY.match(line)
        if key:
            found.setdefault((*section, key.group(1)), number)
    return found
