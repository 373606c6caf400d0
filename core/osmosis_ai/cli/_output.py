"""Shared console output for CLI commands: rich for humans, JSON for machines."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.markup import escape

__all__ = ["CliState", "quiet_libraries", "state"]


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


def quiet_libraries() -> None:
    """Keep library progress bars and advisory warnings out of the CLI's output and logs.

    The CLI is the application, so it may set these; ``--debug`` leaves everything on. The
    variables are read when transformers/tqdm are first imported and are inherited by worker
    subprocesses, which is why they are set before anything heavy is imported.
    """
    import logging
    import os
    import warnings

    # tqdm reads TQDM_* as defaults: transformers' GGUF conversion uses plain tqdm.
    for key, value in (
        ("HF_HUB_DISABLE_PROGRESS_BARS", "1"),
        ("TQDM_DISABLE", "1"),
        ("TRANSFORMERS_VERBOSITY", "error"),
        ("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1"),
        ("TOKENIZERS_PARALLELISM", "false"),
    ):
        os.environ.setdefault(key, value)
    os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning,ignore::UserWarning")
    for category in (FutureWarning, UserWarning):
        for module in ("transformers", "peft", "torch", "trl"):
            warnings.filterwarnings("ignore", category=category, module=module)
    # uvicorn logs a traceback for each request still in flight when a gateway stops
    # (a generation abandoned by a rollout that timed out); the result records the failure.
    logging.getLogger("uvicorn.error").setLevel(logging.CRITICAL)
