"""Shared console output for CLI commands: rich for humans, JSON for machines."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.markup import escape

__all__ = ["CliState", "state"]


@dataclass
class CliState:
    debug: bool = False
    console: Console = field(default_factory=lambda: Console(highlight=False))
    err_console: Console = field(default_factory=lambda: Console(stderr=True, highlight=False))

    def error(self, message: str) -> None:
        # Messages are plain text: escape them, or rich eats '[trainer]' in install hints.
        self.err_console.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)

    def warn(self, message: str) -> None:
        self.err_console.print(f"[bold yellow]warning:[/] {escape(message)}", soft_wrap=True)

    def emit_json(self, payload: Any) -> None:
        sys.stdout.write(json.dumps(payload, indent=2, default=str) + "\n")
        sys.stdout.flush()


state = CliState()
