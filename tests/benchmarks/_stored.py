"""Stored benchmark results: the raw per-run records a BENCHMARKS.md section is rendered from.

A sitting (one run of a benchmark command) is kept as ``docs/benchmarks/<section>.json``: the
machine, the command, the code fingerprint, the load average, and one record per run, written
after every run so an interrupted sitting keeps what it measured. The section is rendered from
that file alone (``python -m tests.benchmarks.<module> render`` redoes it without measuring),
so every figure and verdict in it comes from stored data, never from a hand.

The fingerprint is a hash of the source files a section measures (as they were in the working
tree when it ran). Rendering compares it with the files now: a section whose code changed
since its results says **stale** at its top.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.benchmarks._report import (
    ROOT,
    behaviour_bytes,
    git,
    load_average,
    machine,
    write_section,
)

__all__ = ["Sitting", "fingerprint", "stale_note", "write_missing"]

STORE = ROOT / "docs" / "benchmarks"


def _files(paths: Sequence[str]) -> list[str]:
    """The tracked Python files under ``paths`` (git's list; every file when git is not
    there). An entry ``":!FOLDER"`` (git's exclude pathspec) leaves that folder out."""
    out = git("ls-files", "--", *paths)
    if out is None:
        skip = tuple(p.removeprefix(":!").rstrip("/") + "/" for p in paths if p.startswith(":!"))
        found = [p for path in paths if not path.startswith(":!")
                 for p in ([ROOT / path] if (ROOT / path).is_file() else
                           (ROOT / path).rglob("*.py"))]
        names = (str(p.relative_to(ROOT)) for p in found)
        return sorted(n for n in names if not n.startswith(skip))
    return sorted(line for line in out.splitlines() if line.endswith(".py"))


def fingerprint(paths: Sequence[str]) -> str:
    """sha256 (first 16 hex digits) of the names and contents of the Python files under
    ``paths`` (comments and docstrings aside: :func:`behaviour_bytes`), as they are in the
    working tree now."""
    digest = hashlib.sha256()
    for name in _files(paths):
        file = ROOT / name
        if file.exists():
            digest.update(name.encode() + b"\0" + behaviour_bytes(file) + b"\0")
    return digest.hexdigest()[:16]


def _commit() -> str:
    return (git("rev-parse", "--short", "HEAD") or "unknown").strip()


def _dirty(paths: Sequence[str]) -> list[str]:
    out = git("status", "--porcelain", "--", *paths) or ""
    return sorted(line[3:] for line in out.splitlines() if line.endswith(".py"))


class Sitting:
    """One sitting's stored results: ``Sitting.start(...)`` to measure, ``Sitting.load(...)``
    to render."""

    def __init__(self, name: str, data: dict[str, Any]) -> None:
        self.name = name
        self.data = data

    @classmethod
    def path(cls, name: str) -> Path:
        return STORE / f"{name}.json"

    @classmethod
    def start(cls, name: str, command: str, code: Sequence[str], **extra: Any) -> Sitting:
        """A new sitting (replacing the stored one when its first run is recorded)."""
        data = {
            "command": command,
            "machine": machine(),
            "commit": _commit(),
            "code": list(code),
            "fingerprint": fingerprint(code),
            "uncommitted": _dirty(code),
            "started": _now(),
            "load_at_start": load_average(),
            "runs": [],
            **extra,
        }
        return cls(name, data)

    @classmethod
    def exists(cls, name: str) -> bool:
        return cls.path(name).exists()

    @classmethod
    def load(cls, name: str) -> Sitting:
        path = cls.path(name)
        if not path.exists():
            raise SystemExit(f"{path}: no stored results; run the benchmark first")
        return cls(name, json.loads(path.read_text()))

    @classmethod
    def for_render(cls, name: str, title: str, command: str) -> Sitting | None:
        """The stored sitting to render, or None after writing the section that says there is
        none yet (:func:`write_missing`)."""
        if not cls.exists(name):
            write_missing(name, title, command)
            return None
        return cls.load(name)

    @property
    def runs(self) -> list[dict[str, Any]]:
        runs: list[dict[str, Any]] = self.data["runs"]
        return runs

    def record(self, run: dict[str, Any]) -> None:
        """Add one run (with the time and load average) and write the file at once."""
        code = fingerprint(self.data["code"])  # the code as it is when the run ends
        self.runs.append({**run, "at": _now(), "load": os.getloadavg()[0], "fingerprint": code})
        self.data["ended"] = _now()
        self.data["load_at_end"] = load_average()
        path = self.path(self.name)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1) + "\n")
        tmp.replace(path)


    def write(self, title: str, body: str) -> None:
        """Write this sitting's BENCHMARKS.md section: its machine, load and dates from the
        stored file, a **stale** line when the code moved, the commit and the raw file, then
        ``body`` (rendered from the stored runs alone)."""
        data = self.data
        head = (
            stale_note(self)
            + f"Code: {data['commit']} (fingerprint {data['fingerprint']}); raw runs: "
            f"`docs/benchmarks/{self.name}.json`.\n\n"
        )
        write_section(
            self.name,
            title,
            head + body,
            data["command"],
            machine_text=f"{data['machine']}; load average {data['load_at_start']} at the start, "
            f"{data.get('load_at_end', '-')} at the end",
            date=f"{data['started']} to {data.get('ended', data['started'])}",
        )


def write_missing(name: str, title: str, command: str) -> None:
    """The section of a benchmark with no stored sitting: says so, and how to make one."""
    write_section(
        name,
        title,
        "No stored results for this section: nothing in it has been measured on the code it "
        f"describes. Run the command above (it stores `docs/benchmarks/{name}.json`).",
        command,
        machine_text="-",
        date="-",
    )


def stale_note(sitting: Sitting) -> str:
    """``""`` when the measured code is the same now and at the end of every run as when the
    sitting began, else a **stale** line."""
    then = sitting.data["fingerprint"]
    now = fingerprint(sitting.data["code"])
    moved = sorted({r["fingerprint"] for r in sitting.runs if r.get("fingerprint", then) != then})
    if now == then and not moved:
        return ""
    during = f"; runs ended on other code too ({', '.join(moved)})" if moved else ""
    return (
        f"**stale**: the code this section measures ({', '.join(sitting.data['code'])}) changed "
        f"since these results began (fingerprint {then} then, {now} now{during}); rerun the "
        "command above.\n\n"
    )


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
