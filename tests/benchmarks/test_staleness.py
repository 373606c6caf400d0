"""Stale marks from git: a section whose measured code changed since its results' commit."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.benchmarks import _staleness
from tests.benchmarks._report import ROOT
from tests.benchmarks._staleness import CODE, SELF_MARKED, mark_stale

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _section(name: str, date: str, body: str) -> str:
    return (
        f"<!-- bench:{name} -->\n## {name}\n\n- Machine: m\n- Command: `c`\n- Date: {date}\n\n"
        f"{body}\n<!-- /bench:{name} -->\n"
    )


def _commit(repo: Path, message: str) -> None:
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", message],
        cwd=repo,
        check=True,
    )


def test_marks_only_sections_whose_code_changed_and_refreshes(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("A = 1\n")
    (tmp_path / "pkg" / "b.py").write_text("B = 1\n")
    report = tmp_path / "BENCHMARKS.md"
    report.write_text(
        "# Benchmarks\n\n"
        + _section("alpha", "2026-01-01 10:00 UTC", "| x |\n|---|\n| 1 |")
        + "\n"
        + _section("beta", "2026-01-01 10:05 UTC", "beta body")
        + "\n"
        + _section("gamma", "2026-01-02 09:00 UTC", "measured, not committed yet")
    )
    code = {"alpha": ("pkg/a.py",), "beta": ("pkg/b.py",), "gamma": ("pkg/a.py",)}
    text = report.read_text()
    report.write_text(
        text.replace(_section("gamma", "2026-01-02 09:00 UTC", "measured, not committed yet"), "")
    )
    _commit(tmp_path, "results of alpha and beta")
    (tmp_path / "pkg" / "a.py").write_text("A = 2\n")
    _commit(tmp_path, "change what alpha measures")
    report.write_text(text)  # gamma's results: in the working tree only

    assert mark_stale(report, tmp_path, code) == ["alpha"]
    out = report.read_text()
    alpha = out.split("<!-- bench:alpha -->")[1].split("<!-- /bench:alpha -->")[0]
    assert (
        "- Date: 2026-01-01 10:00 UTC\n\n**stale** (code changed since the results): pkg/a.py"
        in alpha
    )
    assert alpha.rstrip().endswith("| 1 |")  # the results stay, under the mark
    assert "**stale**" not in out.split("<!-- bench:beta -->")[1]

    assert mark_stale(report, tmp_path, code) == ["alpha"]  # idempotent: one mark
    assert report.read_text() == out

    (tmp_path / "pkg" / "a.py").write_text("A = 1\n")  # the code back as measured
    assert mark_stale(report, tmp_path, code) == []
    assert "**stale**" not in report.read_text()


def test_every_benchmark_says_what_it_measures() -> None:
    benches = {
        p.stem.removeprefix("bench_") for p in (ROOT / "tests/benchmarks").glob("bench_*.py")
    }
    assert benches - SELF_MARKED - set(CODE) == set()
    for name, paths in CODE.items():
        assert name in benches, name
        for path in paths:
            assert (ROOT / path).exists(), f"{name}: {path}"


def test_no_git_history_means_no_mark(tmp_path: Path) -> None:
    report = tmp_path / "BENCHMARKS.md"
    report.write_text(_section("alpha", "2026-01-01 10:00 UTC", "body"))
    assert _staleness.mark_stale(report, tmp_path, {"alpha": ("x.py",)}) == []


def test_a_comment_or_docstring_change_does_not_mark_a_section_stale(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "pkg").mkdir()
    code_file = tmp_path / "pkg" / "a.py"
    code_file.write_text('"""Module."""\nA = 1  # one\n')
    report = tmp_path / "BENCHMARKS.md"
    report.write_text("# Benchmarks\n\n" + _section("alpha", "2026-01-01 10:00 UTC", "body"))
    _commit(tmp_path, "results")
    code_file.write_text('"""Module, better said."""\n# why one\nA = 1  # still one\n')
    _commit(tmp_path, "comments")
    assert mark_stale(report, tmp_path, {"alpha": ("pkg",)}) == []
    code_file.write_text("A = 2\n")
    assert mark_stale(report, tmp_path, {"alpha": ("pkg",)}) == ["alpha"]
