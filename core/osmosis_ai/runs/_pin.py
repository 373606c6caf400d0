"""Which git revision of the rollout code a training run runs (Git Sync).

The seeds' rule: config values come from the local TOML, rollout code from the workspace's git
repository, and "this synced copy is what ``osmosis train submit`` actually runs, so
uncommitted local edits are not included". So:

- ``[experiment] commit_sha`` / ``branch``: that revision.
- Neither, in a git workspace whose ``HEAD`` holds the rollout folder: ``HEAD`` (Git Sync). The
  run records the commit and the uncommitted files under the rollout folder it left out
  (modified, added, untracked, deleted), and ``train submit`` says both.
- Neither, and the rollout folder is not committed (a scaffold just written inside some other
  repository, a repository without a commit), or no git at all: the working tree, as it is
  (with a note saying why, when it is a repository).

A pinned or synced run gets the revision's files exported into ``<run>/code/`` (``git
archive``, so the working tree is never touched) and its entrypoint is loaded from there.
``train submit --working-tree`` runs the working tree even where Git Sync would apply.
Either way the run records the revision and whether the tree had uncommitted changes.
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
    synced: bool = False
    """Git Sync: no revision in the config, so the committed ``HEAD`` of the rollout folder
    runs (``pinned`` is then true too: the code comes from ``<run>/code``)."""
    left_out: tuple[str, ...] = ()
    """Git Sync: the uncommitted files under the rollout folder that the run does not include,
    as ``path (modified|untracked|deleted|added|renamed)``, paths relative to the repository."""
    note: str | None = None
    """Why a git workspace runs its working tree (the rollout folder is not committed)."""
    subtree: str | None = None
    """Git Sync: the rollout folder, relative to the repository; only it is exported (a
    workspace inside a large repository does not copy all of it into every run)."""

    def as_status(self) -> dict[str, Any]:
        return {
            "revision": self.revision, "dirty": self.dirty, "pinned": self.pinned,
            "branch": self.branch, "repo_root": str(self.repo_root) if self.repo_root else None,
            "synced": self.synced, "left_out": list(self.left_out),
        }

    def describe(self, rollout_dir: Path) -> list[str]:
        """What ``train submit`` says about the code it runs: one line, and a second naming
        the files left out (Git Sync) or why the working tree runs."""
        if self.synced and self.revision:
            lines = [f"code: {rollout_dir.name} at commit {self.revision[:12]} (HEAD of "
                     f"{self.repo_root}); uncommitted edits are not included"]
            if self.left_out:
                shown = ", ".join(self.left_out[:10])
                more = f" and {len(self.left_out) - 10} more" if len(self.left_out) > 10 else ""
                lines.append(
                    f"left out (not committed): {shown}{more}. Commit them to train on them, "
                    "or pass --working-tree to run the files as they are"
                )
            return lines
        if self.pinned and self.revision:
            return [f"code: {rollout_dir.name} at commit {self.revision[:12]} (pinned by the "
                    "config)"]
        return [f"code: {rollout_dir} (working tree)"] + ([self.note] if self.note else [])


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=False
    )


def pin_revision(config: Any, *, sync: bool = True) -> CodePin:
    """Resolve the config's ``commit_sha``/``branch`` in the workspace's git repository; with
    neither, Git Sync (``sync``): ``HEAD`` when it holds the rollout folder (see the module
    docstring), else the working tree.

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
        head = _git(repo, "rev-parse", "--verify", "-q", "HEAD^{commit}").stdout.strip() or None
        return _sync_head(config, repo, head, dirty) if sync else CodePin(head, dirty, False, repo)
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


def _sync_head(config: Any, repo: Path, head: str | None, dirty: bool) -> CodePin:
    """Git Sync: ``HEAD`` when it holds the rollout folder; else the working tree, saying why."""
    rollout = Path(config.rollout_dir(must_exist=False))
    try:
        rel = rollout.resolve().relative_to(repo.resolve()).as_posix()
    except ValueError:  # a symlinked rollout folder outside the repository
        return CodePin(head, dirty, False, repo, note=(
            f"{rollout} lies outside the git repository {repo}: running the working tree"))
    if head is None:
        return CodePin(None, dirty, False, repo, note=(
            f"the git repository {repo} has no commit yet: running the working tree of "
            f"{rel}/ (commit it to train on a fixed revision)"))
    tracked = _git(repo, "ls-tree", "-r", "--name-only", "-z", head, "--", f"{rel}/")
    if tracked.returncode != 0 or not tracked.stdout.strip("\0"):
        return CodePin(head, dirty, False, repo, note=(
            f"{rel}/ is not committed in the git repository {repo}: running the working "
            "tree as it is (commit the rollout to train on a fixed revision, as Git Sync does)"))
    return CodePin(
        head, dirty, True, repo, synced=True, left_out=_uncommitted(repo, rel), subtree=rel
    )


_KINDS = {"?": "untracked", "D": "deleted", "A": "added", "R": "renamed", "C": "copied"}


def _uncommitted(repo: Path, rel: str) -> tuple[str, ...]:
    """The files under ``rel`` whose working-tree state differs from ``HEAD`` (ignored files
    are not listed: they are never part of a commit)."""
    out = _git(repo, "status", "--porcelain", "-z", "--untracked-files=all", "--", f"{rel}/")
    entries = out.stdout.split("\0")
    found: list[str] = []
    i = 0
    while i < len(entries):
        entry = entries[i]
        i += 1
        if len(entry) < 4:
            continue
        code, path = entry[:2], entry[3:]
        if code[0] in "RC":
            i += 1  # the rename's source follows
        kind = next((_KINDS[c] for c in code if c in _KINDS), "modified")
        found.append(f"{path} ({kind})")
    return tuple(found)


def export_revision(pin: CodePin, dest: Path) -> Path:
    """Write the files of ``pin.revision`` into ``dest`` (``git archive``; Git Sync: only the
    rollout folder); returns ``dest``."""
    if pin.repo_root is None or pin.revision is None:
        raise ValueError("export_revision needs a resolved git revision")
    paths = ["--", f"{pin.subtree}/"] if pin.subtree else []
    out = subprocess.run(
        ["git", "archive", "--format=tar", pin.revision, *paths],
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
