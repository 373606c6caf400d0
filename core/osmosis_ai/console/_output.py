"""Shared console output for CLI commands: rich for humans, JSON for machines."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console, ConsoleDimensions
from rich.markup import escape
from rich.segment import Segment

__all__ = ["CliConsole", "CliState", "quiet_libraries", "state"]


_PIPE_WIDTH = 100_000


class CliConsole(Console):
    """A rich console that, writing to a pipe or a log file, never wraps a value.

    Rich lays out for 80 columns when the output is not a terminal, which breaks paths and
    numbers mid-value (``/results`` / ``.jsonl``) in logs and in the input of other programs.
    There is no width to fit there, so lines stay whole and lose their padding; ``COLUMNS``
    still wins when set.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._fixed_width = kwargs.get("width") is not None
        super().__init__(*args, **kwargs)

    def _is_pipe(self) -> bool:
        return not self.is_terminal and not self._fixed_width and not os.environ.get("COLUMNS")

    @property
    def size(self) -> ConsoleDimensions:
        dims = Console.size.fget(self)  # type: ignore[attr-defined,unused-ignore]
        return ConsoleDimensions(_PIPE_WIDTH, dims.height) if self._is_pipe() else dims

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        Console.size.fset(self, new_size)  # type: ignore[attr-defined,unused-ignore]

    # rich has no public hook on the rendered text; this override makes data's control
    # characters visible and trims line ends in pipes.
    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        text = super()._render_buffer(_visible_segments(buffer))
        if not self._is_pipe():
            return text
        return "\n".join(line.rstrip() for line in text.split("\n"))


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""C0 and C1 control characters but tab and newline."""


def visible(text: str) -> str:
    """``text`` with its control characters written out (ESC as ``\\x1b``)."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _visible_segments(buffer: Iterable[Segment]) -> Iterable[Segment]:
    """Text read from files (a run's status, a trace, an eval summary) may carry terminal
    escapes: ``ESC ] 0;`` retitles the terminal, ``ESC [2J`` clears it, ``ESC ] 8;;`` plants a
    link. Segments of text show them as ``\\x1b``; rich's own control segments (cursor moves
    of live views) pass, and its styles are added after this, so colours stay."""
    for seg in buffer:
        if seg.control or not _CONTROL.search(seg.text):
            yield seg
        else:
            yield Segment(visible(seg.text), seg.style)


@dataclass
class CliState:
    debug: bool = False
    console: Console = field(default_factory=lambda: CliConsole(highlight=False))
    err_console: Console = field(default_factory=lambda: CliConsole(stderr=True, highlight=False))

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
