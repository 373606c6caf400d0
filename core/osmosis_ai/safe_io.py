"""The one reader for files osmosis did not just write: run and eval folders, traces,
demonstrations, datasets, configs and caches.

Any of those files may have been copied, edited or crafted, so every read here guarantees:

- **regular files only**: a FIFO, a device, a socket or a folder is refused without blocking
  (the file is opened with ``O_NONBLOCK`` and checked with ``fstat`` on the open descriptor, so
  what is checked is what is read);
- **no links inside a store**: with ``under=ROOT`` every component below ``ROOT`` is opened
  with ``O_NOFOLLOW`` relative to its parent's descriptor (``openat``), so neither a linked file
  nor a linked folder on the way is followed, and ``..`` never leaves ``ROOT``; without
  ``under``, only the last component is checked (``follow=True``: a path the user named,
  whose links are theirs);
- **a size cap** checked before reading (a 200 MB ``status.json`` is refused at once);
- **strict UTF-8**, with the byte offset of the first bad byte;
- **bounded JSON**: at most :data:`MAX_JSON_DEPTH` nested arrays/objects (checked before parsing,
  so ``[[[…`` 200,000 levels deep never reaches the recursive parser) and integers of at most
  :data:`MAX_INT_DIGITS` digits (never Python's int-conversion ``ValueError``);
- **JSONL line by line**: a bad line is reported with its number and the rest is read; a last
  line cut short (no newline) is reported as such.

Every failure is one :class:`~osmosis_ai.errors.UnreadableFileError`: "this file is unreadable:
PATH: REASON". Listings catch it per file, so one bad run or eval never hides the others.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import stat
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path
from typing import IO, Any

from osmosis_ai.errors import UnreadableFileError

__all__ = [
    "JSONL_MAX_BYTES",
    "JSON_MAX_BYTES",
    "MAX_INT_DIGITS",
    "MAX_JSON_DEPTH",
    "STREAM_MAX_BYTES",
    "TEXT_MAX_BYTES",
    "JsonLines",
    "UnreadableFileError",
    "loads_json",
    "locked",
    "open_append",
    "open_file",
    "open_regular",
    "planted_entries",
    "read_bytes",
    "read_json",
    "read_json_object",
    "read_jsonl",
    "read_text",
    "read_toml",
]

MAX_JSON_DEPTH = 100
"""Most nested arrays/objects in one JSON value (tool schemas nest a dozen levels)."""
MAX_INT_DIGITS = 100
"""Most digits of a JSON integer (token ids, steps, pids and times have at most 20)."""
JSON_MAX_BYTES = 32 * 1024 * 1024
"""Most bytes of one JSON file (a status, a summary, an eval trace)."""
JSONL_MAX_BYTES = 128 * 1024 * 1024
"""Most bytes of one JSONL file of a run or eval folder (metrics, results, a step's traces)."""
TEXT_MAX_BYTES = 4 * 1024 * 1024
"""Most bytes of a config or other small text file."""

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _mb(n: int) -> str:
    return f"{n / (1024 * 1024):.1f} MB"


def _os_reason(exc: OSError, *, link_refused: bool) -> str:
    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
        return "no such file"
    if exc.errno == errno.ELOOP and link_refused:
        where = f" ({exc.strerror})" if exc.strerror and "/" in exc.strerror else ""
        return (
            f"a symbolic link{where}: links are not followed here; keep plain files and "
            "folders in this folder"
        )
    return exc.strerror or str(exc)


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode)
    except OSError:
        return False


def _walk_open(root: Path, rel: Path) -> int:
    """Open ``root/rel`` without following any link below ``root`` (``openat`` per component)."""
    if rel.is_absolute() or any(p in ("..", "") for p in rel.parts) or not rel.parts:
        raise OSError(errno.EINVAL, f"not a plain path inside {root}")
    if os.open not in os.supports_dir_fd:  # pragma: no cover - no openat: check by path
        for i in range(1, len(rel.parts) + 1):
            if (root / Path(*rel.parts[:i])).is_symlink():
                raise OSError(errno.ELOOP, "a symbolic link")
        return os.open(root / rel, os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _CLOEXEC)
    fd = os.open(root, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
    try:
        for part in rel.parts[:-1]:
            try:
                nxt = os.open(part, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=fd)
            except OSError as exc:  # say "a link" rather than "not a folder" for a linked one
                if exc.errno in (errno.ENOTDIR, errno.ELOOP) and _is_link(part, fd):
                    raise OSError(errno.ELOOP, f"{part}/ is a symbolic link") from None
                raise
            os.close(fd)
            fd = nxt
        return os.open(rel.parts[-1], os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _CLOEXEC, dir_fd=fd)
    finally:
        os.close(fd)


def open_regular(
    path: Path,
    *,
    under: Path | None = None,
    follow: bool = False,
    max_bytes: int = JSON_MAX_BYTES,
) -> tuple[int, int]:
    """``(fd, size)`` of the regular file ``path`` (see the module docstring for the rules).

    The caller owns ``fd`` (close it). Raises :class:`UnreadableFileError` (``missing`` set
    when there is no such file).
    """
    path = Path(path)
    try:
        if under is not None:
            # Lexical: a ``..`` that climbs out of ``under`` is refused by the walk.
            rel = Path(os.path.relpath(os.path.abspath(path), os.path.abspath(under)))
            fd = _walk_open(Path(under), rel)
        else:
            flags = os.O_RDONLY | _NONBLOCK | _CLOEXEC | (0 if follow else _NOFOLLOW)
            fd = os.open(path, flags)
    except OSError as exc:
        missing = exc.errno in (errno.ENOENT, errno.ENOTDIR)
        reason = _os_reason(exc, link_refused=under is not None or not follow)
        raise UnreadableFileError(path, reason, missing=missing) from None
    try:
        st = _regular(path, fd)
        if st.st_size > max_bytes:
            raise UnreadableFileError(
                path, f"{_mb(st.st_size)}, more than the {_mb(max_bytes)} read from such a file"
            )
    except BaseException:
        os.close(fd)
        raise
    return fd, st.st_size


def _regular(path: Path, fd: int) -> os.stat_result:
    """``fstat`` of the open ``fd``, refused unless it is a regular file."""
    st = os.fstat(fd)
    for test, what in _KINDS:
        if test(st.st_mode):
            raise UnreadableFileError(path, f"{what}, not a regular file")
    if not stat.S_ISREG(st.st_mode):
        raise UnreadableFileError(path, "not a regular file")
    return st


def open_append(path: Path) -> int:
    """A descriptor to append to (or lock) the file ``path`` of a run or eval folder, created
    when missing. The folder may be crafted: a link there is refused, not written through (a
    ``train.log`` linked to ``~/.bashrc`` would receive a worker's output), and a FIFO or a
    device is refused without blocking (opening a FIFO to write waits for a reader forever).

    The caller owns the descriptor (close it). Raises :class:`UnreadableFileError`.
    """
    path = Path(path)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NOFOLLOW | _NONBLOCK | _CLOEXEC
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:  # ENXIO: a FIFO nobody reads
        reason = "a FIFO (named pipe), not a regular file" if exc.errno == errno.ENXIO else (
            _os_reason(exc, link_refused=True))
        raise UnreadableFileError(path, reason) from None
    try:
        _regular(path, fd)
    except BaseException:
        os.close(fd)
        raise
    return fd  # O_NONBLOCK stays: it changes nothing for a regular file


@contextlib.contextmanager
def locked(lock_path: Path) -> Iterator[None]:
    """An exclusive advisory lock on ``lock_path`` (POSIX); elsewhere the atomic rename alone.

    Raises:
        UnreadableFileError: the lock file is a link, a FIFO or another non-regular file (a
            crafted folder; a FIFO would block the open forever).
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    fd = open_append(lock_path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def planted_entries(folder: Path, *, skip: tuple[str, ...] = (), limit: int = 5) -> list[str]:
    """Links and special files (FIFOs, sockets, devices) under ``folder``, as paths relative
    to it (at most ``limit``; the contents of its children named in ``skip`` not walked).

    For a run or eval folder about to be written into again (a resume): a link there would be
    written through, a FIFO would block the writer. Osmosis itself writes only plain files
    and folders there.
    """
    root = Path(folder)
    found: list[str] = []
    for here_name, dirs, files in os.walk(root, followlinks=False):
        here = Path(here_name)
        names = sorted(dirs) + sorted(files)
        if here == root:
            dirs[:] = [d for d in dirs if d not in skip]
        for name in names:
            try:
                mode = (here / name).lstat().st_mode
            except FileNotFoundError:  # removed while walking
                continue
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                found.append((here / name).relative_to(root).as_posix())
                if len(found) >= limit:
                    return found
    return found


STREAM_MAX_BYTES = 1 << 50
"""No cap: for files read as a stream (datasets), where size is no danger."""


def open_file(
    path: Path,
    mode: str = "rb",
    *,
    under: Path | None = None,
    follow: bool = False,
    max_bytes: int = STREAM_MAX_BYTES,
    encoding: str | None = None,
    newline: str | None = None,
) -> IO[Any]:
    """A regular file opened for reading (``"rb"`` or ``"r"``), checked as :func:`open_regular`
    checks it: for readers that stream a file they cannot cap, such as a dataset."""
    if mode not in ("r", "rb"):
        raise ValueError(f"open_file reads only ('r' or 'rb'), not {mode!r}")
    fd, _size = open_regular(path, under=under, follow=follow, max_bytes=max_bytes)
    if mode == "rb":
        return os.fdopen(fd, "rb")
    return os.fdopen(fd, "r", encoding=encoding or "utf-8", newline=newline)


def read_bytes(
    path: Path, *, under: Path | None = None, follow: bool = False, max_bytes: int = JSON_MAX_BYTES
) -> bytes:
    """The bytes of a regular file of at most ``max_bytes``."""
    fd, _size = open_regular(path, under=under, follow=follow, max_bytes=max_bytes)
    with os.fdopen(fd, "rb") as fh:
        try:
            data = fh.read(max_bytes + 1)
        except OSError as exc:
            raise UnreadableFileError(path, exc.strerror or str(exc)) from None
    if len(data) > max_bytes:  # it grew after the check
        raise UnreadableFileError(path, f"more than the {_mb(max_bytes)} read from such a file")
    return data


def _decode(path: Path, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnreadableFileError(
            path, f"not UTF-8 text (byte {exc.start} is 0x{data[exc.start]:02x})"
        ) from None


def read_text(
    path: Path, *, under: Path | None = None, follow: bool = False, max_bytes: int = TEXT_MAX_BYTES
) -> str:
    """A regular file's text (strict UTF-8, a leading BOM dropped)."""
    text = _decode(path, read_bytes(path, under=under, follow=follow, max_bytes=max_bytes))
    return text.removeprefix("\ufeff")


_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


_TOML_SKIP = re.compile(
    r'"""(?:\\.|[^\\])*?"""'  # multi-line basic string
    r"|'{3}.*?'{3}"  # multi-line literal string
    r'|"[^"\\\n]*(?:\\.[^"\\\n]*)*"'  # basic string
    r"|'[^'\n]*'"  # literal string
    r"|#[^\n]*",  # comment
    re.S,
)
"""What TOML's bracket count leaves out: its four kinds of string, and comments."""


def _depth(text: str, strings: re.Pattern[str] = _STRING) -> int:
    """How deep arrays and objects nest in ``text`` (what ``strings`` matches left out),
    without recursing."""
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:
        return 0
    brackets = _NOT_BRACKET.sub("", strings.sub('""', text))
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


def _int(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(
            f"an integer of {len(digits.lstrip('-'))} digits (at most {MAX_INT_DIGITS} are read)"
        )
    return int(digits)


def loads_json(text: str) -> Any:
    """Parse JSON text within :data:`MAX_JSON_DEPTH` and :data:`MAX_INT_DIGITS`.

    Raises:
        ValueError: not JSON, or past a limit; the message says which (no location prefix).
    """
    if _depth(text) > MAX_JSON_DEPTH:
        raise ValueError(f"JSON nested too deeply (more than {MAX_JSON_DEPTH} levels)")
    try:
        return json.loads(text, parse_int=_int)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except RecursionError:  # a shallow stack left too little room: never a traceback
        raise ValueError("JSON nested too deeply to read") from None


def read_json(
    path: Path, *, under: Path | None = None, follow: bool = False, max_bytes: int = JSON_MAX_BYTES
) -> Any:
    """A JSON file's value (all the checks of the module docstring)."""
    text = read_text(path, under=under, follow=follow, max_bytes=max_bytes)
    try:
        return loads_json(text)
    except ValueError as exc:
        raise UnreadableFileError(path, str(exc)) from None


def read_json_object(
    path: Path, *, under: Path | None = None, follow: bool = False, max_bytes: int = JSON_MAX_BYTES
) -> dict[str, Any]:
    """A JSON file whose value must be an object."""
    data = read_json(path, under=under, follow=follow, max_bytes=max_bytes)
    if not isinstance(data, dict):
        raise UnreadableFileError(path, f"not a JSON object but {type(data).__name__}")
    return data


@dataclass
class JsonLines:
    """A JSONL file's readable lines and the located problems of the others."""

    path: Path
    records: list[tuple[int, Any]] = field(default_factory=list)
    """``(line number, value)`` of each line that parsed."""
    bad: list[tuple[int, str]] = field(default_factory=list)
    """``(line number, reason)`` of each line that did not."""

    def objects(self) -> list[dict[str, Any]]:
        """The values that are JSON objects (others count as bad lines in :attr:`problems`)."""
        return [v for _, v in self.records if isinstance(v, dict)]

    @property
    def problems(self) -> list[str]:
        """``path:line: reason`` for every bad line and every line that is not an object."""
        out = [f"{self.path}:{n}: {why}" for n, why in self.bad]
        out += [
            f"{self.path}:{n}: not a JSON object"
            for n, v in self.records
            if not isinstance(v, dict)
        ]
        return out


def read_jsonl(
    path: Path,
    *,
    under: Path | None = None,
    follow: bool = False,
    max_bytes: int = JSONL_MAX_BYTES,
) -> JsonLines:
    """Every line of a JSONL file: the file must pass the checks, each line is parsed alone."""
    data = read_bytes(path, under=under, follow=follow, max_bytes=max_bytes)
    out = JsonLines(Path(path))
    lines = data.split(b"\n")
    torn = lines[-1].strip() != b""  # a last line without its newline: a write cut short
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            out.bad.append((number, f"not UTF-8 text (byte {exc.start} of the line)"))
            continue
        try:
            out.records.append((number, loads_json(text)))
        except ValueError as exc:
            last = number == len(lines) and torn
            out.bad.append(
                (
                    number,
                    "the last line is incomplete (being written, or cut short)"
                    if last
                    else str(exc),
                )
            )
    return out


def read_toml(
    path: Path, *, under: Path | None = None, follow: bool = False, max_bytes: int = TEXT_MAX_BYTES
) -> tuple[str, dict[str, Any]]:
    """A TOML file's text and table (nesting and integer size bounded like JSON's)."""
    text = read_text(path, under=under, follow=follow, max_bytes=max_bytes)
    if _depth(text, _TOML_SKIP) > MAX_JSON_DEPTH:
        raise UnreadableFileError(
            path, f"arrays nested too deeply (more than {MAX_JSON_DEPTH} levels)"
        )
    try:
        return text, tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UnreadableFileError(path, f"invalid TOML: {exc}") from None
    except RecursionError:
        raise UnreadableFileError(path, "arrays or tables nested too deeply to read") from None
    except ValueError as exc:  # Python's int-conversion digit limit (4300)
        reason = str(exc)
        if "integer string conversion" in reason:
            reason = "an integer of more than 4300 digits; write it as a string"
        raise UnreadableFileError(path, reason) from None
