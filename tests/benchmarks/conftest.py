"""Every benchmark test writes its README.md and BENCHMARKS.md into a scratch copy.

A render under test once wrote its made-up figures ("0.40x", "30.00 s") into the real README's
``trainer-real-readme`` block, and they were committed: the generators' output paths are
redirected for every test here, not test by test.
"""

from __future__ import annotations

import shutil

import pytest

from tests.benchmarks import _report


@pytest.fixture(autouse=True)
def _scratch_docs(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    scratch = tmp_path_factory.mktemp("docs")
    for name, real in (("README", _report.README), ("REPORT", _report.REPORT)):
        copy = scratch / real.name
        shutil.copyfile(real, copy)
        monkeypatch.setattr(_report, name, copy)
