"""Past and running eval runs of a workspace: ``osmosis eval list`` / ``eval info``.

Each run is a folder under ``<workspace>/.osmosis/evals/`` (``<config>-<time>`` or a
``--name``) with ``run.json``, ``results.jsonl``, ``summary.json`` and, for a comparison,
``comparison.json`` and ``baseline/``. A detached run (``eval submit``) also has
``eval.log`` and ``submit.json`` (the worker's pid), written before the worker starts. A run
that says ``running`` but whose process is gone is shown as ``crashed``.

Every file is read through :mod:`osmosis_ai.safe_io` with the eval folder as a component that
is never followed: a linked eval folder is not listed, a linked, FIFO, huge or too deeply nested
file is named in the run's ``problems`` and the rest of the listing still shows.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from osmosis_ai.errors import OsmosisError, UnreadableFileError
from osmosis_ai.eval._journal import read_journal
from osmosis_ai.eval._records import EvalRecord, EvalRunInfo
from osmosis_ai.safe_io import open_regular, read_json_object

__all__ = ["EvalRunView", "evals_root", "find_eval_run", "list_eval_runs"]


def evals_root(start: Path | None = None) -> Path:
    """``.osmosis/evals`` of the workspace holding ``start`` (default: the current folder):
    the nearest folder upwards that has ``.osmosis/evals`` or ``configs/``."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / ".osmosis" / "evals").is_dir() or (folder / "configs").is_dir():
            return folder / ".osmosis" / "evals"
    return here / ".osmosis" / "evals"


LOG_TAIL_BYTES = 64 * 1024
"""The end of ``eval.log`` read for ``eval info``."""


def _read_json(path: Path, problems: list[str] | None = None) -> dict[str, Any] | None:
    """A JSON object file of an eval folder (opened under the folder's parent, no link
    followed); ``None`` when missing or unreadable, the reason added to ``problems``."""
    try:
        return read_json_object(path, under=path.parent.parent)
    except UnreadableFileError as exc:
        if problems is not None and not exc.missing:
            problems.append(str(exc))
        return None


def _alive(worker: dict[str, Any] | None) -> bool | None:
    from osmosis_ai.runs._process import process_alive

    return process_alive(worker) if worker else None


@dataclass
class EvalRunView:
    """One eval run as ``eval list`` / ``eval info`` show it."""

    path: Path
    info: EvalRunInfo | None
    """``run.json``; ``None`` while a submitted run has not started yet (or never did)."""
    status: str
    """``pending``, ``running``, ``completed``, ``interrupted``, ``failed`` or ``crashed``."""
    submit: dict[str, Any] | None = None
    problems: list[str] = field(default_factory=list)
    """``this file is unreadable: PATH: REASON`` for each file of the run left out."""

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def summary(self) -> dict[str, Any]:
        """The run's summary; for a run still going (or one that crashed), computed from the
        results written so far."""
        if self.info is not None and self.info.summary:
            return self.info.summary
        saved = _read_json(self.path / "summary.json", self.problems)
        if saved:
            return saved
        if self.info is None or not (self.path / "results.jsonl").is_file():
            return {}
        from osmosis_ai.eval._metrics import summarize

        records = self.records()
        summary = summarize(records, pass_threshold=self.info.pass_threshold, n=self.info.n)
        return summary.model_dump(mode="json")

    @property
    def comparison(self) -> dict[str, Any] | None:
        return _read_json(self.path / "comparison.json", self.problems)

    def records(self) -> list[EvalRecord]:
        """``results.jsonl``'s records; none (and the reason in :attr:`problems`) when the
        file cannot be read whole."""
        return self._journal(self.path / "results.jsonl")

    def _journal(self, path: Path) -> list[EvalRecord]:
        try:
            return read_journal(path)
        except OsmosisError as exc:
            message = str(exc)
            if message not in self.problems:
                self.problems.append(message)
            return []

    def done(self) -> int:
        path = self.path / "results.jsonl"
        if not path.is_file():
            return 0
        return len({(r.row_index, r.run_index) for r in self.records()})

    def log_tail(self, lines: int = 5) -> str:
        """The last ``lines`` of ``eval.log`` (its last 64 KiB read; a link or FIFO: none)."""
        try:
            fd, size = open_regular(self.path / "eval.log", under=self.path.parent,
                                    max_bytes=1 << 50)
        except UnreadableFileError:
            return ""
        with os.fdopen(fd, "rb") as fh:
            fh.seek(max(0, size - LOG_TAIL_BYTES))
            text = fh.read(LOG_TAIL_BYTES).decode("utf-8", errors="replace")
        return "\n".join(text.strip().splitlines()[-lines:])

    def as_dict(self, *, records: bool = False) -> dict[str, Any]:
        info = self.info
        out: dict[str, Any] = {
            "name": self.name,
            "path": str(self.path),
            "status": self.status,
            "config": info.config_name if info else (self.submit or {}).get("config"),
            "model": info.model if info else None,
            "baseline": info.baseline if info else None,
            "checkpoint": info.checkpoint if info else None,
            "n": info.n if info else None,
            "work_items": info.work_items if info else None,
            "done": self.done(),
            "started_at": info.started_at if info else None,
            "finished_at": info.finished_at if info else None,
            "summary": self.summary,
            "comparison": self.comparison,
        }
        if records:
            out["results"] = [r.model_dump(mode="json") for r in self.records()]
            base = self.path / "baseline" / "results.jsonl"
            if base.is_file():
                out["baseline_results"] = [r.model_dump(mode="json") for r in self._journal(base)]
        out["problems"] = list(self.problems)
        return out


def load_eval_run(path: Path) -> EvalRunView | None:
    """The eval run in ``path``, or ``None`` when the folder holds none."""
    problems: list[str] = []
    submit = _read_json(path / "submit.json", problems)
    raw = path / "run.json"
    info: EvalRunInfo | None = None
    data = _read_json(raw, problems)
    if data is not None:
        try:
            info = EvalRunInfo.model_validate(data)
        except ValidationError as exc:
            first = str(exc).splitlines()[0]
            problems.append(f"this file is unreadable: {raw}: not an eval run record ({first})")
    if info is None and (problems or raw.exists() or raw.is_symlink()):
        return EvalRunView(path=path, info=None, status="unknown", submit=submit,
                           problems=problems)
    if info is None and submit is None:
        return None
    worker = (info.worker if info else None) or (submit or {}).get("worker")
    if info is None:
        status = "crashed" if _alive(worker) is False else "pending"
    elif info.status == "running" and _alive(worker) is False:
        status = "crashed"
    else:
        status = info.status
    if status == "completed" and info is not None and info.baseline is not None:
        # A comparison is over once comparison.json is written; until then the baseline runs.
        if not (path / "comparison.json").is_file():
            base = load_eval_run(path / "baseline")
            if base is not None and base.status != "completed":
                status = base.status
            elif base is None:
                status = "crashed" if _alive(worker) is False else "running"
    return EvalRunView(path=path, info=info, status=status, submit=submit, problems=problems)


def list_eval_runs(root: Path) -> list[EvalRunView]:
    """Every eval run under ``root``, oldest first (a linked folder is not listed)."""
    if not root.is_dir():
        return []
    views = [
        v for p in sorted(root.iterdir())
        if not p.is_symlink() and p.is_dir() and (v := load_eval_run(p))
    ]
    return sorted(views, key=lambda v: (v.info.started_at if v.info else "", v.name))


def find_eval_run(root: Path, name: str) -> EvalRunView:
    """The eval run called ``name`` (its folder name, a unique prefix of one, or a path)."""
    direct = Path(name)
    # A path the user typed: its links are theirs, resolved once; below it none is followed.
    if direct.is_dir() and (view := load_eval_run(direct.resolve())) is not None:
        return view
    runs = list_eval_runs(root)
    exact = [v for v in runs if v.name == name]
    for hits in (exact, [v for v in runs if v.name.startswith(name)]):
        if len(hits) == 1:
            return hits[0]
        if len(hits) > 1:
            raise OsmosisError(
                f"eval run name {name!r} matches {len(hits)} runs: "
                f"{', '.join(v.name for v in hits)}; give the full name"
            )
    known = ", ".join(v.name for v in runs[-10:]) or "none"
    raise OsmosisError(
        f"no eval run named {name!r} under {root} (runs there: {known}); see 'osmosis eval list'"
    )
