"""CI's heavy-session accounting (``.ci/heavy.sh``): a session skipped for disk or time is
counted in the last line, and fails CI when the recent commits change what it guards.

The functions run in bash inside a scratch git repository, with ``df`` and ``python3`` replaced
by scripts on ``PATH`` and ``NOX`` by ``echo``, so nothing is installed and no cache is touched.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HEAVY = REPO / ".ci" / "heavy.sh"

pytestmark = pytest.mark.skipif(
    shutil.which("bash") is None or shutil.which("git") is None, reason="needs bash and git"
)

_FAKE_DF = """#!/usr/bin/env bash
# 100 GiB free once .nox/old is gone, else 3 GiB.
if [[ -e .nox/old ]]; then kib=$((3 * 1048576)); else kib=$((100 * 1048576)); fi
echo "Filesystem 1024-blocks Used Available Capacity Mounted on"
echo "/dev/vda 264212084 1000 $kib 1% /"
"""


def _git(repo: Path, *args: str) -> str:
    env = dict(
        os.environ,
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@t",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@t",
    )
    out = subprocess.run(
        ["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True
    )
    return out.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "README.md").write_text("x\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "base")
    return repo


def _commit(repo: Path, path: str) -> None:
    (repo / path).parent.mkdir(parents=True, exist_ok=True)
    (repo / path).write_text(f"changed {path}\n")
    _git(repo, "add", path)
    _git(repo, "commit", "-qm", f"change {path}")


def _ci(repo: Path, tmp_path: Path, *, low_disk: bool, budget_s: int = 5400) -> tuple[int, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "df").write_text(_FAKE_DF)
    (bin_dir / "python3").write_text("#!/usr/bin/env bash\nexit 0\n")  # `pip cache purge`
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    if low_disk:
        (repo / ".nox" / "old").mkdir(parents=True, exist_ok=True)
    base = _git(repo, "rev-list", "--max-parents=0", "HEAD")
    script = f"""
set -euo pipefail
NOX=(echo ran nox)
source {HEAVY}
declare -A GUARDS=(
  [vllm]="pyproject.toml trainer/osmosis_trainer/engines/_vllm.py"
  [ray]="pyproject.toml
    trainer/osmosis_trainer/distributed/*"
)
RAN=(tests)
heavy vllm 6 900
heavy ray 4 600
ci_summary
"""
    env = dict(
        os.environ,
        PATH=f"{bin_dir}:{os.environ['PATH']}",
        HOME=str(tmp_path),
        CI_BASE=base,
        CI_BUDGET_S=str(budget_s),
    )
    proc = subprocess.run(["bash", "-c", script], cwd=repo, env=env, capture_output=True, text=True)
    return proc.returncode, proc.stdout + proc.stderr


def _keep_low(repo: Path) -> None:
    """Make the disk stay short after freeing: .nox/old comes back as a file CI cannot remove."""
    (repo / ".nox").mkdir(exist_ok=True)
    (repo / ".nox" / "old").write_text("")


def test_every_session_runs_when_there_is_room(repo: Path, tmp_path: Path) -> None:
    _commit(repo, "trainer/osmosis_trainer/engines/_vllm.py")
    code, out = _ci(repo, tmp_path, low_disk=False)
    assert code == 0, out
    assert out.count("ran nox -s") == 2
    assert out.strip().splitlines()[-1] == "CI passed: sessions run: tests vllm ray"


def test_freeing_the_disk_comes_before_skipping(repo: Path, tmp_path: Path) -> None:
    code, out = _ci(repo, tmp_path, low_disk=True)  # .nox/old is a venv that can go
    assert code == 0, out
    assert "ran nox -s vllm" in out and not (repo / ".nox" / "old").exists()


def test_a_skipped_session_is_counted_and_green_when_nothing_it_guards_changed(
    repo: Path, tmp_path: Path
) -> None:
    _commit(repo, "docs/notes.md")
    _keep_low(repo)
    code, out = _ci(repo, tmp_path, low_disk=False)
    assert code == 0, out
    assert "nox -s vllm not run: 3 GiB free on disk, it needs about 6 GiB" in out
    assert out.strip().splitlines()[-1] == (
        "CI passed: sessions run: tests; 2 sessions not run: vllm (disk), ray (disk)"
    )


def test_a_time_skip_of_a_session_guarding_nothing_changed_is_counted(
    repo: Path, tmp_path: Path
) -> None:
    _commit(repo, "trainer/osmosis_trainer/distributed/_actor.py")  # ray's, not vllm's
    code, out = _ci(repo, tmp_path, low_disk=False, budget_s=700)  # ray fits, vllm does not
    assert code == 0, out
    assert "nox -s vllm not run: 0s of CI's 700s used, it needs about 900s" in out
    assert "ran nox -s ray" in out
    assert out.strip().splitlines()[-1] == (
        "CI passed: sessions run: tests ray; 1 session not run: vllm (time)"
    )


def test_a_skipped_session_that_guards_a_change_fails_ci(repo: Path, tmp_path: Path) -> None:
    _commit(repo, "trainer/osmosis_trainer/engines/_vllm.py")
    code, out = _ci(repo, tmp_path, low_disk=False, budget_s=700)
    assert code == 1, out
    assert "nox -s vllm did not run but guards what changed since" in out
    assert "  trainer/osmosis_trainer/engines/_vllm.py" in out
    assert out.strip().splitlines()[-1] == (
        "CI failed: sessions run: tests ray; 1 session not run: vllm (time)"
    )


def test_two_sessions_skipped_for_disk(repo: Path, tmp_path: Path) -> None:
    _commit(repo, "pyproject.toml")  # the build: every session guards it
    _keep_low(repo)
    code, out = _ci(repo, tmp_path, low_disk=False)
    assert code == 1, out
    assert out.strip().splitlines()[-1] == (
        "CI failed: sessions run: tests; 2 sessions not run: vllm (disk), ray (disk)"
    )


def test_changes_that_cannot_be_known_count_as_guarded(repo: Path) -> None:
    missing = "0" * 40  # a base commit this clone does not have (a shallow clone)
    script = f"source {HEAVY}; CI_BASE={missing}; changed_files"
    proc = subprocess.run(["bash", "-c", script], cwd=repo, capture_output=True, text=True)
    assert proc.stdout.strip() == "*"


def _run_guards() -> dict[str, list[str]]:
    text = (REPO / ".ci" / "run").read_text()
    build = re.search(r'^BUILD="([^"]*)"', text, re.M)
    block = re.search(r"declare -A GUARDS=\((.*?)\n\)", text, re.S)
    assert build and block
    guards = {}
    for name, value in re.findall(r'\[(\w+)\]="([^"]*)"', block.group(1)):
        guards[name] = value.replace("$BUILD", build.group(1)).split()
    return guards


def test_the_ci_mapping_names_real_paths_and_every_heavy_session() -> None:
    guards = _run_guards()
    heavy = set(re.findall(r"^ *heavy (\w+) ", (REPO / ".ci" / "run").read_text(), re.M))
    assert sorted(guards) == ["browser", "lowest", "ray", "vllm"]
    # harbor guards nothing on purpose: a machine with no Docker daemon must not fail CI
    assert sorted(heavy) == ["browser", "harbor", "lowest", "ray", "vllm"]
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    for name, patterns in guards.items():
        for pattern in patterns:
            assert any(fnmatch.fnmatchcase(f, pattern) for f in tracked), (name, pattern)
