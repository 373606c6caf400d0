"""A per-machine cache of GGUF models converted to plain transformers folders.

Reading the embedded SmolLM2 GGUF costs ~20 s on two cores on every start: transformers
de-quantises each tensor and converts the GGUF tokenizer to a fast tokenizer. The result never
changes for a given file, so it is written once, as ``save_pretrained`` output (fp32
safetensors + tokenizer), under the user cache folder and keyed by the GGUF file's SHA-256;
later starts load the folder with a memory map in a few seconds.

Safety:
- a build happens in a private temporary folder that is renamed into place only when complete,
  so a reader never sees half a model;
- two processes that start together serialise on a lock file, so the second reuses the first
  one's build instead of converting again;
- ``manifest.json`` records the source digest and every file's size and SHA-256; a folder whose
  manifest is missing, from another format version, or disagrees with the files on disk is
  rebuilt, and so is one that fails to load (:func:`discard`). The hashes are checked on load;
  a full check is remembered in ``verified.json`` by each file's (size, mtime, ctime, inode),
  and any write, rename or ``chmod`` of a file changes its ctime, which no user can set back,
  so the next load hashes the files again (~1 s for the embedded model's 0.5 GB);
- what is loaded from the cache is code-adjacent (a tokenizer config, weights), so the cache is
  used only when no one else can write to it: the cache root, its ``models`` folder and the
  model's folder must belong to the user and not be writable by others (group-writable only
  for the user's own private group). Otherwise :class:`UnsafeCacheError` names the folder and
  the fix, and the caller converts in memory instead. Folders it creates are private (0700).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

from osmosis_ai.errors import OsmosisError, UnreadableFileError
from osmosis_ai.safe_io import locked, read_json, read_json_object

__all__ = [
    "UnsafeCacheError",
    "cache_root",
    "cached_conversion",
    "check_private",
    "discard",
    "file_sha256",
]

_FORMAT = 2  # 2: every file's SHA-256 in the manifest
_MANIFEST = "manifest.json"
_MEMO_MAX_BYTES = 64 * 1024
"""A digest memo is a few hundred bytes; anything bigger is not one."""
_VERIFIED = "verified.json"


class UnsafeCacheError(OsmosisError, OSError):
    """The cache folder can be written by someone else, so what it holds is not trusted.

    Attributes:
        folder: the folder that failed the check.
    """

    def __init__(self, message: str, folder: Path) -> None:
        super().__init__(message)
        self.folder = folder


def cache_root() -> Path:
    """``$OSMOSIS_CACHE_DIR``, else ``$XDG_CACHE_HOME/osmosis``, else ``~/.cache/osmosis``."""
    explicit = os.environ.get("OSMOSIS_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "osmosis"


def file_sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _source_digest(source: Path, memo: Path) -> str:
    """The source's SHA-256, remembered by (path, size, mtime): hashing ~100 MB costs ~0.3 s
    per start, a stat does not. A changed file (new size or mtime) is hashed again."""
    st = source.stat()
    stamp = {"path": str(source.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    try:
        # A memo that is a link, a FIFO, too big or deep is only a miss: hash again.
        saved = read_json_object(memo, under=memo.parent, max_bytes=_MEMO_MAX_BYTES)
        if {k: saved.get(k) for k in stamp} == stamp and isinstance(saved.get("sha256"), str):
            return str(saved["sha256"])
    except UnreadableFileError:
        pass
    digest = file_sha256(source)
    with contextlib.suppress(OSError):  # only a speed-up: a read-only cache still works
        memo.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo.with_name(f"{memo.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({**stamp, "sha256": digest}))
        os.replace(tmp, memo)
    return digest


def _own_private_group(gid: int) -> bool:
    """Whether ``gid`` is the user's private group (named like the user, no other members)."""
    try:
        import grp
        import pwd

        user = pwd.getpwuid(os.geteuid())
        group = grp.getgrgid(gid)
    except (ImportError, KeyError):
        return False
    return gid == user.pw_gid and group.gr_name == user.pw_name and not group.gr_mem


def check_private(folder: Path) -> None:
    """Raise :class:`UnsafeCacheError` unless only the user can write to ``folder``."""
    if not hasattr(os, "geteuid"):  # pragma: no cover - Windows: no POSIX owners/modes
        return
    st = folder.lstat()
    me = os.geteuid()
    problem = None
    if stat.S_ISLNK(st.st_mode):
        problem = "is a symbolic link"
    elif st.st_uid != me:
        problem = f"belongs to uid {st.st_uid}, not to you (uid {me})"
    elif st.st_mode & stat.S_IWOTH:
        problem = f"is writable by every user (mode {stat.S_IMODE(st.st_mode):o})"
    elif st.st_mode & stat.S_IWGRP and not _own_private_group(st.st_gid):
        problem = f"is writable by group {st.st_gid} (mode {stat.S_IMODE(st.st_mode):o})"
    if problem:
        raise UnsafeCacheError(
            f"the converted-model cache folder {folder} {problem}: someone else could replace "
            "the weights or tokenizer osmosis loads from it, so it is not used (the model is "
            f"converted in memory, ~20 s per start). Fix: `chmod go-w {folder}` if it is yours, "
            "or point OSMOSIS_CACHE_DIR to a folder only you can write.",
            folder,
        )


def _stamp(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def _manifest_ok(folder: Path, digest: str) -> bool:
    """Whether ``folder`` holds exactly what its manifest says: sizes always, SHA-256s unless
    the last full check is remembered for these very files (see the module docstring)."""
    try:
        manifest = read_json_object(folder / _MANIFEST, under=folder)
        if manifest.get("format") != _FORMAT or manifest.get("source_sha256") != digest:
            return False
        files: dict[str, dict[str, object]] = manifest["files"]
        if not files or any(
            (folder / name).stat().st_size != entry["size"] for name, entry in files.items()
        ):
            return False
        stamps = {name: _stamp(folder / name) for name in files}
        with contextlib.suppress(OSError, ValueError):
            if read_json(folder / _VERIFIED, under=folder) == stamps:
                return True
        if any(file_sha256(folder / name) != entry["sha256"] for name, entry in files.items()):
            return False
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False
    with contextlib.suppress(OSError):  # only a speed-up for the next load
        tmp = folder / f"{_VERIFIED}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(stamps))
        os.replace(tmp, folder / _VERIFIED)
    return True


def _private_dirs(root: Path, base: Path) -> None:
    """Create ``root`` and ``base`` (private) if missing, then check both."""
    for folder in (root, base):
        if not folder.exists():
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        check_private(folder)


def discard(folder: Path) -> None:
    """Remove a cached folder that turned out unusable, so the next call rebuilds it."""
    shutil.rmtree(folder, ignore_errors=True)


def cached_conversion(
    source: Path,
    build: Callable[[Path], None],
    *,
    kind: str = "hf",
    root: Path | None = None,
) -> Path:
    """The cached conversion of ``source``, running ``build(empty_folder)`` on a miss.

    ``build`` writes the converted model into the folder it is given. Raises ``OSError`` when
    the cache folder cannot be written, :class:`UnsafeCacheError` (an ``OSError`` too) when
    someone else could write to it; callers then convert in memory instead.
    """
    root = root or cache_root()
    base = root / "models"
    _private_dirs(root, base)
    digest = _source_digest(source, base / f"{source.stem}-{kind}.digest.json")
    final = base / f"{source.stem}-{kind}-{digest[:16]}"
    if final.exists():
        check_private(final)
    if _manifest_ok(final, digest):
        return final
    with locked(base / f"{final.name}.lock"):
        if final.exists():
            check_private(final)
        if _manifest_ok(final, digest):  # another process finished it while we waited
            return final
        discard(final)  # stale or corrupt
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=base))
        try:
            build(tmp)
            files = {
                str(p.relative_to(tmp)): {"size": p.stat().st_size, "sha256": file_sha256(p)}
                for p in tmp.rglob("*")
                if p.is_file()
            }
            manifest = {"format": _FORMAT, "source": str(source), "source_sha256": digest}
            (tmp / _MANIFEST).write_text(json.dumps({**manifest, "files": files}, indent=2))
            # Just hashed: the first load need not hash again (renaming the folder leaves the
            # files' stamps as they are).
            (tmp / _VERIFIED).write_text(json.dumps({n: _stamp(tmp / n) for n in files}))
            os.replace(tmp, final)
        except BaseException:
            discard(tmp)
            raise
    return final
