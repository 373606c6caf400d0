"""What ``ship_rollout`` leaves out of the folder Ray uploads to every node (no cluster needed)."""

from __future__ import annotations

import fnmatch
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from osmosis_trainer.distributed._cluster import SHIP_EXCLUDES, job_runtime_env


def _shipped(folder: Path, excludes: list[str]) -> set[str]:
    """Files Ray would upload: its excludes are gitignore patterns; ours have no slash, so
    each matches a file or folder name at any depth."""
    assert all("/" not in pattern for pattern in excludes)
    return {
        str(p.relative_to(folder))
        for p in folder.rglob("*")
        if p.is_file()
        and not any(
            fnmatch.fnmatchcase(part, pattern)
            for part in p.relative_to(folder).parts
            for pattern in excludes
        )
    }


def test_the_shipped_folder_leaves_env_files_and_caches_out(tmp_path: Path) -> None:
    folder = tmp_path / "rollouts" / "calc"
    for name in [
        "main.py",
        "tools/add.py",
        "data/environment.json",
        ".env",
        ".env.local",
        "tools/.env.production",
        ".envrc",
        ".git/config",
        "__pycache__/main.cpython-311.pyc",
        "runs/old/status.json",
    ]:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("OPENAI_API_KEY=sk-planted\n" if ".env" in name else "x")
    config: Any = SimpleNamespace(
        cluster=SimpleNamespace(ship_rollout=True),
        remote=None,
        entrypoint_path=lambda must_exist=True: folder / "main.py",
    )
    env = job_runtime_env(config)
    assert env is not None and env["working_dir"] == str(folder)
    assert env["excludes"] == list(SHIP_EXCLUDES)
    shipped = _shipped(folder, env["excludes"])
    assert shipped == {"main.py", "tools/add.py", "data/environment.json"}
