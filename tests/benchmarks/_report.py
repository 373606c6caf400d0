"""Write one benchmark's section of BENCHMARKS.md, keeping the other sections as they are."""

from __future__ import annotations

import os
import platform
import re
import sys
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "BENCHMARKS.md"
_HEADER = (
    "# Benchmarks\n\nEach section is written by `nox -s bench` (or the command it names) and "
    "records the machine and the command that produced it.\n"
)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    gpu = ""
    try:
        import torch

        if torch.cuda.is_available():
            gpu = f", GPU {torch.cuda.get_device_name(0)}"
    except ImportError:
        pass
    return (
        f"{cpu}, {os.cpu_count()} cores{gpu}, Python {sys.version.split()[0]}, "
        f"{platform.system()} {platform.release()}"
    )


def write_section(name: str, title: str, body: str, command: str) -> None:
    """Replace (or append) the section ``name`` of BENCHMARKS.md."""
    text = REPORT.read_text() if REPORT.exists() else _HEADER
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    section = (
        f"<!-- bench:{name} -->\n## {title}\n\n"
        f"- Machine: {machine()}\n- Command: `{command}`\n- Date: {stamp}\n\n"
        f"{body.strip()}\n<!-- /bench:{name} -->"
    )
    pattern = re.compile(rf"<!-- bench:{re.escape(name)} -->.*?<!-- /bench:{re.escape(name)} -->", re.S)
    text = pattern.sub(lambda _m: section, text) if pattern.search(text) else text.rstrip() + "\n\n" + section + "\n"
    REPORT.write_text(text)
