"""Is the process that owns a run still alive? pid, its start time and the boot it ran in.

A pid alone is not enough: after the worker dies (kill -9, the OOM killer) or the machine
reboots, the number can be given to an unrelated process. The worker records its pid, its
start time (``/proc/<pid>/stat`` field 22) and the boot id; a reader compares all three.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

__all__ = ["describe_process", "process_alive"]


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    return raw[raw.rfind(")") + 2 :].split()


def _start_ticks(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[19]) if fields and len(fields) > 19 else None


def describe_process(pid: int | None = None) -> dict[str, Any]:
    """What identifies ``pid`` (default: this process) across time: pid, host, boot, start."""
    pid = os.getpid() if pid is None else pid
    return {
        "pid": pid,
        "host": socket.gethostname(),
        "boot_id": _boot_id(),
        "pid_start": _start_ticks(pid),
    }


def process_alive(info: dict[str, Any]) -> bool | None:
    """``True``/``False`` for a process described by :func:`describe_process` on this machine;
    ``None`` when it ran on another host (only its heartbeat can tell)."""
    pid = info.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return None
    host = info.get("host")
    if host is not None and host != socket.gethostname():
        return None
    boot = info.get("boot_id")
    if boot is not None and _boot_id() not in (None, boot):
        return False  # the machine rebooted since
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    fields = _stat_fields(pid)
    if fields is not None:
        if fields[0] in ("Z", "X"):
            return False  # killed, not yet reaped by its parent
        start = info.get("pid_start")
        if not isinstance(start, int) or isinstance(start, bool):
            # A worker on this machine always records its start time (this very file is
            # readable): without one the live pid cannot be shown to be that worker.
            return False
        if len(fields) > 19 and int(fields[19]) != start:
            return False  # the pid now belongs to another process
    return True
