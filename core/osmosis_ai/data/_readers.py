"""Lazy record readers, one per file format.

Each reader yields :class:`RawRecord` items one at a time, so a multi-gigabyte file is never held
in memory: JSONL and CSV line by line, a JSON array element by element (an incremental parser over
1 MiB chunks), parquet by row groups and record batches. A record that cannot be parsed is yielded
as an issue; ``fatal`` issues end the file (the rest cannot be located reliably).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from osmosis_ai.data._row import DatasetIssue
from osmosis_ai.errors import MissingExtraError
from osmosis_ai.safe_io import open_file

__all__ = ["SUPPORTED_SUFFIXES", "RawRecord", "count_records", "iter_records"]

SUPPORTED_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")
_CHUNK = 1 << 20
_CSV_NULLABLE = ("system_prompt", "ground_truth", "label")


@dataclass(frozen=True, slots=True)
class RawRecord:
    """One data row as read (``record``), or the problem that kept it from being read."""

    source_row_index: int
    line: int | None
    record: Any = None
    issue: DatasetIssue | None = None
    fatal: bool = False


def iter_records(path: Path, file: str, *, skip: int = 0) -> Iterator[RawRecord]:
    """Yield the records of ``path``, lazily. The first ``skip`` rows are passed over (and, where
    the format allows, not parsed)."""
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return _jsonl(path, file, skip)
    if suffix == ".csv":
        return _csv(path, file, skip)
    if suffix == ".json":
        return _json_array(path, file, skip)
    return _parquet(path, file, skip)


def count_records(path: Path, file: str) -> int:
    """Count data rows without validating them (blank JSONL lines are not rows)."""
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        with open_file(path, "rb", follow=True) as f:
            return sum(1 for raw in _lines(f) if raw.strip())
    if suffix == ".parquet":
        return int(_open_parquet(path, file).metadata.num_rows)
    count = 0
    for item in iter_records(path, file):
        if item.fatal and item.issue is not None:
            from osmosis_ai.data._row import DatasetRowError

            raise DatasetRowError(item.issue)
        count += 1
    return count


def _issue(file: str, message: str, **where: Any) -> DatasetIssue:
    return DatasetIssue(file=file, message=message, **where)


MAX_LINE_BYTES = 64 * 1024 * 1024
"""The longest JSONL row read; a longer line is one located issue, never held in memory."""


def _lines(f: IO[bytes]) -> Iterator[bytes]:
    """The lines of ``f``; a line past :data:`MAX_LINE_BYTES` comes back as ``b"\\0"`` (which
    no JSON parses) after the rest of it is skipped in bounded reads."""
    while True:
        raw = f.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
            while (rest := f.readline(MAX_LINE_BYTES)) and not rest.endswith(b"\n"):
                pass
            yield _TOO_LONG
            continue
        yield raw


_TOO_LONG = b"\0too long"


def _jsonl(path: Path, file: str, skip: int) -> Iterator[RawRecord]:
    row = 0
    with open_file(path, "rb", follow=True) as f:
        for lineno, raw in enumerate(_lines(f), 1):
            if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            if not raw.strip():
                continue
            if row < skip:
                row += 1
                continue
            if raw is _TOO_LONG:
                msg = f"line longer than {MAX_LINE_BYTES // (1024 * 1024)} MB; split this row"
                yield RawRecord(row, lineno, issue=_issue(file, msg, line=lineno, row=row))
                row += 1
                continue
            try:
                record = json.loads(raw)
            except json.JSONDecodeError as exc:
                issue = _issue(file, f"invalid JSON: {exc.msg}", line=lineno, char=exc.colno, row=row)
                yield RawRecord(row, lineno, issue=issue)
            except UnicodeDecodeError as exc:
                issue = _issue(file, f"not valid UTF-8 ({exc.reason})", line=lineno, row=row)
                yield RawRecord(row, lineno, issue=issue)
            except (ValueError, RecursionError) as exc:  # a 5,000-digit number, deep nesting
                issue = _issue(file, _unreadable(exc), line=lineno, row=row)
                yield RawRecord(row, lineno, issue=issue)
            else:
                yield RawRecord(row, lineno, record)
            row += 1


def _csv(path: Path, file: str, skip: int) -> Iterator[RawRecord]:
    with open_file(path, "r", follow=True, newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(f)
        try:
            header = next(reader, None)
        except (csv.Error, UnicodeDecodeError) as exc:
            yield RawRecord(0, 1, issue=_issue(file, f"unreadable CSV header: {exc}", line=1), fatal=True)
            return
        if not header:
            msg = "empty CSV file; expected a header row naming the columns (user_prompt, ...)"
            yield RawRecord(0, 1, issue=_issue(file, msg, line=1), fatal=True)
            return
        dupes = sorted({h for h in header if header.count(h) > 1})
        if dupes:
            msg = f"duplicate column names in the header: {', '.join(dupes)}"
            yield RawRecord(0, 1, issue=_issue(file, msg, line=1), fatal=True)
            return
        if "user_prompt" not in header:
            msg = f"missing column; the header has: {', '.join(header)}"
            issue = _issue(file, msg, line=1, column="user_prompt")
            yield RawRecord(0, 1, issue=issue, fatal=True)
            return
        yield from _csv_rows(reader, header, file, skip)


def _csv_rows(reader: Any, header: list[str], file: str, skip: int) -> Iterator[RawRecord]:
    row = 0
    while True:
        start = reader.line_num + 1
        try:
            values = next(reader, None)
        except (csv.Error, UnicodeDecodeError) as exc:
            yield RawRecord(row, start, issue=_issue(file, f"unreadable CSV: {exc}", line=start), fatal=True)
            return
        if values is None:
            return
        if not values:
            continue  # a blank line
        if row < skip:
            row += 1
            continue
        if len(values) != len(header):
            msg = f"the record has {len(values)} fields but the header has {len(header)}"
            yield RawRecord(row, start, issue=_issue(file, msg, line=start, row=row))
        else:
            record: dict[str, Any] = dict(zip(header, values, strict=True))
            for key in _CSV_NULLABLE:
                # CSV has no null: an empty cell in these columns means "no value".
                if record.get(key) == "":
                    record[key] = None
            yield RawRecord(row, start, record)
        row += 1


class _TextCursor:
    """A window over a text file for incremental JSON parsing, with line/column tracking."""

    def __init__(self, f: IO[str]) -> None:
        self.f = f
        self.buf = ""
        self.pos = 0
        self.eof = False
        self._lines_before = 0
        self._col_before = 0

    def fill(self) -> bool:
        """Read more text (at least as much as is buffered, so big elements cost O(n log n))."""
        if self.eof:
            return False
        if self.pos > _CHUNK:
            dropped = self.buf[: self.pos]
            newlines = dropped.count("\n")
            if newlines:
                self._lines_before += newlines
                self._col_before = len(dropped) - dropped.rfind("\n") - 1
            else:
                self._col_before += len(dropped)
            self.buf, self.pos = self.buf[self.pos :], 0
        chunk = self.f.read(max(_CHUNK, len(self.buf)))
        if not chunk:
            self.eof = True
            return False
        self.buf += chunk
        return True

    def where(self, p: int) -> tuple[int, int]:
        """1-based (line, column) of buffer position ``p``."""
        newlines = self.buf.count("\n", 0, p)
        if newlines:
            col = p - self.buf.rfind("\n", 0, p)
        else:
            col = self._col_before + p + 1
        return self._lines_before + newlines + 1, col

    def peek(self) -> str:
        """Skip whitespace and return the next character ("" at the end of the file)."""
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in " \t\r\n":
                self.pos += 1
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.fill():
                return ""


def _decode_next(cur: _TextCursor, decoder: json.JSONDecoder) -> Any:
    """Decode the JSON value at the cursor, reading more text while it may be incomplete."""
    while True:
        try:
            value, end = decoder.raw_decode(cur.buf, cur.pos)
        except json.JSONDecodeError as exc:
            incomplete = exc.msg.startswith("Unterminated string") or len(cur.buf) - exc.pos < 32
            if incomplete and cur.fill():
                continue
            raise
        # A number or literal touching the end of the buffer may continue in the next chunk.
        if end == len(cur.buf) and cur.fill():
            continue
        cur.pos = end
        return value


def _unreadable(exc: Exception) -> str:
    """The reason Python's JSON parser gave up on a syntactically valid value."""
    if isinstance(exc, RecursionError):
        return "JSON nested too deeply to read (thousands of levels); flatten this row"
    if "integer string conversion" in str(exc):
        return "a number has more than 4,300 digits; store it as a string"
    return f"unreadable JSON value: {str(exc).splitlines()[0]}"


def _fatal(cur: _TextCursor, file: str, message: str, row: int) -> RawRecord:
    line, col = cur.where(cur.pos)
    return RawRecord(row, line, issue=_issue(file, message, line=line, char=col), fatal=True)


def _json_array(path: Path, file: str, skip: int) -> Iterator[RawRecord]:
    with open_file(path, "r", follow=True, encoding="utf-8-sig") as f:
        cur = _TextCursor(f)
        try:
            if cur.peek() != "[":
                yield _fatal(cur, file, "expected a JSON array of row objects ('[{...}, ...]'); "
                             "for one object per line use a .jsonl file", 0)
                return
            cur.pos += 1
            if cur.peek() != "]":
                yield from _json_elements(cur, file, skip)
        except UnicodeDecodeError as exc:
            yield RawRecord(0, None, issue=_issue(file, f"not valid UTF-8 ({exc.reason})"), fatal=True)


def _json_elements(cur: _TextCursor, file: str, skip: int) -> Iterator[RawRecord]:
    """The elements of an array whose '[' was consumed, then its closing ']' and the end."""
    decoder = json.JSONDecoder()
    row = 0
    while True:
        cur.peek()
        line, _ = cur.where(cur.pos)
        try:
            value = _decode_next(cur, decoder)
        except json.JSONDecodeError as exc:
            eline, ecol = cur.where(exc.pos)
            issue = _issue(file, f"invalid JSON: {exc.msg}", line=eline, char=ecol, row=row)
            yield RawRecord(row, eline, issue=issue, fatal=True)
            return
        except (ValueError, RecursionError) as exc:  # a 5,000-digit number, deep nesting
            yield RawRecord(row, line, issue=_issue(file, _unreadable(exc), line=line, row=row),
                            fatal=True)
            return
        if row >= skip:
            yield RawRecord(row, line, value)
        row += 1
        sep = cur.peek()
        if sep == "]":
            break
        if sep != ",":
            yield _fatal(cur, file, f"invalid JSON: expected ',' or ']' after row {row - 1}", row)
            return
        cur.pos += 1
    cur.pos += 1
    if cur.peek() != "":
        yield _fatal(cur, file, "invalid JSON: extra data after the closing ']'", row)


def _open_parquet(path: Path, file: str) -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise MissingExtraError("Reading parquet", "parquet", "pyarrow") from exc
    try:
        return pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises ArrowInvalid/OSError subclasses
        from osmosis_ai.data._row import DatasetRowError

        raise DatasetRowError(_issue(file, f"not a readable parquet file: {exc}")) from exc


def _parquet(path: Path, file: str, skip: int) -> Iterator[RawRecord]:
    pf = _open_parquet(path, file)
    first = 0
    groups: list[int] = []
    for i in range(pf.metadata.num_row_groups):
        n = pf.metadata.row_group(i).num_rows
        if first + n > skip or groups:
            groups.append(i)
        else:
            first += n  # the whole row group lies before the selection: never read it
    row = first
    for group in groups:
        start = row
        end = start + pf.metadata.row_group(group).num_rows - 1
        batches = pf.iter_batches(batch_size=1024, row_groups=[group])
        while True:
            try:
                batch = next(batches)
            except StopIteration:
                break
            except Exception as exc:  # a damaged page: pyarrow raises OSError / ArrowException
                message = (
                    f"row group {group} (rows {start}..{end}): the parquet data cannot be read "
                    f"({type(exc).__name__}: {' '.join(str(exc).split())}); the file is damaged or "
                    "truncated: write it again from its source"
                )
                yield RawRecord(row, None, issue=_issue(file, message, row=row), fatal=True)
                return
            for record in batch.to_pylist():
                if row >= skip:
                    yield RawRecord(row, None, record)
                row += 1
