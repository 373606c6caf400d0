"""Mark BENCHMARKS.md sections whose measured code changed since their results were committed.

Sections kept as stored sittings (``_stored``: ``trainer_real``, ``merge``, ...) and the learning
and GPU sections say **stale** themselves, from fingerprints. The other sections keep no raw
runs; for them the results' commit is found from git (the commit that added the section's
``- Date:`` line) and the code the section measures (:data:`CODE`) is compared between that
commit and the working tree. A section whose code differs gets a **stale** line at its top;
one whose results are not committed yet (just measured) or whose code is unchanged loses it.

``python -m tests.benchmarks stale`` marks every section; ``python -m tests.benchmarks NAME``
does it after measuring.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.benchmarks._report import REPORT, ROOT, behaviour, git

__all__ = ["CODE", "SELF_MARKED", "mark_stale"]

SELF_MARKED = frozenset(
    {
        "trainer_real", "merge", "learning", "learning_search", "gpu", "turn_cache",
        "heldout_files", "hostile", "gateway", "runner", "remote", "engine", "startup",
        "adapters", "cpu", "judge", "prompt_head", "warm_start",
    }
)
"""Benchmarks that compare fingerprints of their own stored results (``learning_search``
writes a table of the ``learning`` section)."""

CODE: Mapping[str, tuple[str, ...]] = {
    "eval": ("core/osmosis_ai/eval", "trainer/osmosis_trainer/engines"),
    "trainer": ("trainer/osmosis_trainer", "core/osmosis_ai/serving", "core/osmosis_ai/rollout"),
    "batching": ("trainer/osmosis_trainer/engines",),
    "ray": ("trainer/osmosis_trainer/distributed", "core/osmosis_ai/rollout"),
}
"""What each section measures besides its own ``tests/benchmarks/bench_<name>.py``."""

_SECTION = re.compile(r"<!-- bench:(\w+) -->\n(.*?)<!-- /bench:\1 -->", re.S)
_DATE = re.compile(r"^- Date: \d{4}-\d\d-\d\d \d\d:\d\d UTC[^\n]*", re.M)
"""A section's whole date line (start to end): two sittings that started in the same minute
still differ in it, so the commit that added it is this section's."""
_MARK = re.compile(r"\*\*stale\*\* \(code changed since the results\):[^\n]*\n\n")


def _results_commit(root: Path, report: Path, date_line: str) -> str | None:
    """The oldest commit that added ``date_line`` to the report (None: not committed)."""
    rel = report.relative_to(root).as_posix()
    out = git("log", "--format=%H", "-S", date_line, "--", rel, root=root)
    commits = (out or "").split()
    return commits[-1] if commits else None


def _changed(root: Path, commit: str, paths: Sequence[str]) -> list[str]:
    """Files under ``paths`` that differ between ``commit`` and the working tree in what they do
    (a Python or TOML file whose comments or docstrings alone changed does not count)."""
    out = git("diff", "--name-only", commit, "--", *paths, root=root)

    def same(name: str) -> bool:
        now = root / name
        old = git("show", f"{commit}:{name}", root=root) if now.suffix in (".py", ".toml") else None
        return old is not None and now.is_file() and behaviour(name, old.encode()) == behaviour(
            name, now.read_bytes()
        )

    return [name for name in sorted((out or "").split()) if not same(name)]


def _marked(name: str, body: str, root: Path, report: Path, code: Sequence[str]) -> str:
    body = _MARK.sub("", body)
    date = _DATE.search(body)
    if date is None:
        return body
    commit = _results_commit(root, report, date.group(0))
    if commit is None:
        return body
    changed = _changed(root, commit, [*code, f"tests/benchmarks/bench_{name}.py"])
    if not changed:
        return body
    shown = ", ".join(changed[:4]) + (f" and {len(changed) - 4} more" if len(changed) > 4 else "")
    line = (
        f"**stale** (code changed since the results): {shown} changed after commit "
        f"{commit[:7]}, which holds these results; rerun the command above.\n\n"
    )
    head_end = body.find("\n\n", date.end())
    if head_end < 0:
        return body + "\n\n" + line
    return body[: head_end + 2] + line + body[head_end + 2 :]


def mark_stale(
    report: Path = REPORT, root: Path = ROOT, code: Mapping[str, Sequence[str]] = CODE
) -> list[str]:
    """Refresh the **stale** lines of ``report``'s sections; returns the names marked."""
    text = report.read_text()
    marked: list[str] = []

    def one(m: re.Match[str]) -> str:
        name, body = m.group(1), m.group(2)
        if name in SELF_MARKED or name not in code:
            return m.group(0)
        new = _marked(name, body, root, report, code[name])
        if _MARK.search(new):
            marked.append(name)
        return f"<!-- bench:{name} -->\n{new}<!-- /bench:{name} -->"

    new_text = _SECTION.sub(one, text)
    if new_text != text:
        report.write_text(new_text)
    return marked
