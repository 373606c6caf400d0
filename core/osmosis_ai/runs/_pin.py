"""``[experiment] commit_sha`` / ``branch``: run the rollout code of that git revision.

The seeds' rule: config values come from the local TOML, rollout code from the workspace's git
repository. A pinned run gets the pinned revision's files exported into ``<run>/code/`` (``git
archive``, so the working tree is never touched) and its entrypoint is loaded from there. An
unpinned run runs the working tree; either way the run records the revision and whether the
tree had uncommitted changes.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from osmosis_ai.errors import ConfigError

__all__ = ["CodePin", "export_revision", "pin_revision", "pinned_path", "verify_pinned_code"]


@dataclass(frozen=True)
class CodePin:
    """The revision a run's rollout code comes from."""

    revision: str | None
    """The full commit hash (``None``: the workspace is not a git repository)."""
    dirty: bool | None
    """Uncommitted changes in the working tree at submit time (``None``: not a repository)."""
    pinned: bool
    """The config pins the revision: the code runs from ``<run>/code``, not the working tree."""
    repo_root: Path | None
    branch: str | None = None

    def as_status(self) -> dict[str, Any]:
        return {
            "revision": self.revision, "dirty": self.dirty, "pinned": self.pinned,
            "branch": self.branch, "repo_root": str(self.repo_root) if self.repo_root else None,
        }


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=False
    )


def pin_revision(config: Any) -> CodePin:
    """Resolve the config's ``commit_sha``/``branch`` in the workspace's git repository.

    Raises:
        ConfigError: a revision is pinned but the workspace is not a git repository, git is
            missing, or the commit/branch does not exist there.
    """
    exp = config.experiment
    where = str(config.source_path or "config")
    workspace = Path(config.workspace_root)
    wanted = exp.commit_sha or exp.branch
    key = "commit_sha" if exp.commit_sha else "branch"
    try:
        top = _git(workspace, "rev-parse", "--show-toplevel")
    except FileNotFoundError as exc:
        if wanted:
            raise ConfigError(
                f"{where}: [experiment].{key} = {wanted!r} needs git, which is not installed"
            ) from exc
        return CodePin(None, None, False, None)
    if top.returncode != 0:
        if wanted:
            raise ConfigError(
                f"{where}: [experiment].{key} = {wanted!r}, but the workspace {workspace} is not "
                "a git repository; run 'git init' and commit the rollout, or remove the key"
            )
        return CodePin(None, None, False, None)
    repo = Path(top.stdout.strip())
    dirty = bool(_git(repo, "status", "--porcelain").stdout.strip())
    if not wanted:
        head = _git(repo, "rev-parse", "--verify", "-q", "HEAD^{commit}")
        return CodePin(head.stdout.strip() or None, dirty, False, repo)
    ref = wanted if exp.commit_sha else f"refs/heads/{wanted}"
    found = _git(repo, "rev-parse", "--verify", "-q", f"{ref}^{{commit}}")
    if found.returncode != 0 and exp.branch:
        found = _git(repo, "rev-parse", "--verify", "-q", f"{wanted}^{{commit}}")
    if found.returncode != 0:
        hint = (
            "git log --oneline lists the commits" if exp.commit_sha
            else "git branch --list shows the branches"
        )
        raise ConfigError(
            f"{where}: [experiment].{key} = {wanted!r} is not a {key.replace('_sha', '')} of the "
            f"workspace repository {repo} ({hint}); commit and fetch it first"
        )
    return CodePin(found.stdout.strip(), dirty, True, repo, branch=exp.branch)


def export_revision(pin: CodePin, dest: Path) -> Path:
    """Write the files of ``pin.revision`` into ``dest`` (``git archive``); returns ``dest``."""
    if pin.repo_root is None or pin.revision is None:
        raise ValueError("export_revision needs a resolved git revision")
    out = subprocess.run(
        ["git", "archive", "--format=tar", pin.revision],
        cwd=pin.repo_root, capture_output=True, check=False,
    )
    if out.returncode != 0:
        raise ConfigError(
            f"git archive {pin.revision} failed in {pin.repo_root}: "
            f"{out.stderr.decode(errors='replace').strip()}"
        )
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(out.stdout)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def pinned_path(pin_status: dict[str, Any] | None, code_dir: Path, path: Path) -> Path:
    """Where ``path`` (a file in the working tree) lies in a pinned run's exported code."""
    if not pin_status or not pin_status.get("pinned") or not pin_status.get("repo_root"):
        return path
    rel = Path(path).resolve().relative_to(Path(pin_status["repo_root"]).resolve())
    return code_dir / rel


def _blob_sha(data: bytes) -> str:
    """Git's object id of a file's contents (``git hash-object``)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()  # noqa: S324 - git's id


def _tree_files(repo: Path, revision: str) -> dict[str, tuple[str, str]] | None:
    """``path -> (mode, object id)`` of every file and link of ``revision`` (``None``: the
    revision is not a commit of ``repo``)."""
    listing = _git(repo, "ls-tree", "-r", "-z", "--full-tree", revision)
    if listing.returncode != 0:
        return None
    out: dict[str, tuple[str, str]] = {}
    for entry in listing.stdout.split("\0"):
        if not entry:
            continue
        meta, path = entry.split("\t", 1)
        mode, kind, oid = meta.split()
        if kind == "blob":  # submodules ("commit") are not exported by git archive
            out[path] = (mode, oid)
    return out


def verify_pinned_code(revision: object, workspace: Path, code_dir: Path) -> Path:
    """Check that ``code_dir`` holds exactly the files of ``revision`` of the workspace's own git
    repository, and return that repository's root (where the pinned paths are relative to).

    A run folder is data: its ``status.json`` names the revision, but the revision is looked
    up in the repository of the workspace the command runs in, and every file under
    ``<run>/code`` must be that commit's (same bytes, no extra files), or no code is loaded.

    Raises:
        ConfigError: the revision is not a commit hash of the workspace's repository, or a
            file under ``code_dir`` differs from it or is not in it.
    """
    where = f"pinned code {code_dir}"
    if not isinstance(revision, str) or not re.fullmatch(r"[0-9a-f]{40}", revision):
        raise ConfigError(f"{where}: the run records no commit hash ({revision!r}); submit the "
                          "config again")
    try:
        top = _git(workspace, "rev-parse", "--show-toplevel")
    except OSError:  # no git, or no such folder
        top = subprocess.CompletedProcess([], 1, "", "")
    if top.returncode != 0:
        raise ConfigError(f"{where}: the workspace {workspace} is not a git repository, so "
                          f"commit {revision} cannot be checked; run the command in the "
                          "workspace the run was submitted from")
    repo = Path(top.stdout.strip())
    expected = _tree_files(repo, revision)
    if expected is None:
        raise ConfigError(f"{where}: commit {revision} is not in the workspace repository "
                          f"{repo}; fetch it, or submit the config again")
    found: dict[str, Path] = {}
    if code_dir.is_dir():
        for path in code_dir.rglob("*"):
            if path.is_symlink() or path.is_file():
                found[path.relative_to(code_dir).as_posix()] = path
            elif not path.is_dir():
                raise ConfigError(f"{where}: {path} is not a file of commit {revision}")
    # Files of the commit may be absent (``export-ignore``); none may be added or changed.
    extra = sorted(set(found) - set(expected))
    changed = []
    for name in sorted(set(found) & set(expected)):
        mode, oid = expected[name]
        path = found[name]
        if mode == "120000":
            ok = path.is_symlink() and _blob_sha(os.readlink(path).encode()) == oid
        else:
            ok = not path.is_symlink() and _blob_sha(path.read_bytes()) == oid
        if not ok:
            changed.append(name)
    if extra or changed:
        parts = [f"{label} {', '.join(names[:5])}{' ...' if len(names) > 5 else ''}"
                 for label, names in (("changed:", changed), ("not in the commit:", extra))
                 if names]
        raise ConfigError(f"{where} does not match commit {revision} of {repo} ("
                          f"{'; '.join(parts)}); the run folder was changed after submit, so "
                          "its code is not run. Submit the config again")
    return repo
