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
- ``manifest.json`` records the source digest and every file's size; a folder whose manifest is
  missing, from another format version, or disagrees with the files on disk is rebuilt, and so
  is one that fails to load (:func:`discard`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = ["cache_root", "cached_conversion", "discard", "file_sha256"]

_FORMAT = 1
_MANIFEST = "manifest.json"


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
        saved = json.loads(memo.read_text())
        if isinstance(saved, dict) and {k: saved.get(k) for k in stamp} == stamp:
            return str(saved["sha256"])
    except (OSError, ValueError, KeyError):
        pass
    digest = file_sha256(source)
    with contextlib.suppress(OSError):  # only a speed-up: a read-only cache still works
        memo.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo.with_name(f"{memo.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({**stamp, "sha256": digest}))
        os.replace(tmp, memo)
    return digest


def _manifest_ok(folder: Path, digest: str) -> bool:
    try:
        manifest = json.loads((folder / _MANIFEST).read_text())
        if manifest.get("format") != _FORMAT or manifest.get("source_sha256") != digest:
            return False
        files = manifest["files"]
        return bool(files) and all(
            (folder / name).stat().st_size == size for name, size in files.items()
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


@contextlib.contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: builds are still atomic, only not shared
        yield
        return
    with lock_path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


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
    the cache folder cannot be written; callers then convert in memory instead.
    """
    base = (root or cache_root()) / "models"
    digest = _source_digest(source, base / f"{source.stem}-{kind}.digest.json")
    final = base / f"{source.stem}-{kind}-{digest[:16]}"
    if _manifest_ok(final, digest):
        return final
    base.mkdir(parents=True, exist_ok=True)
    with _locked(base / f"{final.name}.lock"):
        if _manifest_ok(final, digest):  # another process finished it while we waited
            return final
        discard(final)  # stale or corrupt
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=base))
        try:
            build(tmp)
            files = {
                str(p.relative_to(tmp)): p.stat().st_size for p in tmp.rglob("*") if p.is_file()
            }
            manifest = {"format": _FORMAT, "source": str(source), "source_sha256": digest}
            (tmp / _MANIFEST).write_text(json.dumps({**manifest, "files": files}, indent=2))
            os.replace(tmp, final)
        except BaseException:
            discard(tmp)
            raise
    return final
