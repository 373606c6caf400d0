"""Reading and validating datasets: ``read_dataset``, ``count_rows``, ``validate_dataset``."""

from __future__ import annotations

import os
from collections.abc import Iterator
from os import PathLike
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from osmosis_ai.data._readers import SUPPORTED_SUFFIXES, RawRecord, count_records, iter_records
from osmosis_ai.data._row import DatasetIssue, DatasetRow, DatasetRowError, build_row
from osmosis_ai.errors import DatasetError, UnreadableFileError
from osmosis_ai.safe_io import STREAM_MAX_BYTES, open_regular

__all__ = ["DatasetReport", "check_path", "count_rows", "read_dataset", "validate_dataset"]


def check_path(path: str | PathLike[str]) -> tuple[Path, str]:
    """The dataset file and how to name it in errors; a clear error for an unsupported
    format or a missing file (every reader of dataset files starts here)."""
    p = Path(path)
    label = str(path)
    if p.suffix.lower() not in SUPPORTED_SUFFIXES:
        raise DatasetError(
            f"{label}: unsupported dataset format '{p.suffix or '(no suffix)'}'; "
            f"use one of {', '.join(SUPPORTED_SUFFIXES)}"
        )
    try:
        fd, _size = open_regular(p, follow=True, max_bytes=STREAM_MAX_BYTES)
    except UnreadableFileError as exc:
        if exc.missing:
            raise DatasetError(f"{label}: dataset file not found (looked at {p.resolve()})") from None
        raise DatasetError(f"{label}: {exc.reason}") from None
    os.close(fd)
    return p, label


def read_dataset(
    path: str | PathLike[str], *, limit: int | None = None, offset: int = 0
) -> Iterator[DatasetRow]:
    """Read a dataset lazily, one validated :class:`DatasetRow` at a time.

    Supported formats: ``.jsonl`` (one object per line), ``.json`` (an array of objects, parsed
    incrementally), ``.csv`` (a header row, then one record per row) and ``.parquet`` (read by
    row groups; needs ``pip install "osmosis-ai[parquet]"``). Columns: ``user_prompt``
    (required), ``system_prompt`` (optional), ``ground_truth`` (optional; ``label`` is an alias);
    every other column lands in ``row.metadata``.

    Args:
        path: the dataset file.
        limit: read at most this many rows (after ``offset``); ``None`` reads to the end.
        offset: skip this many data rows first. Skipped rows are not validated.

    Raises:
        DatasetError: at once when the file is missing or its format unsupported; during
            iteration at the first bad row (the message names file, line, row and column).
    """
    p, label = check_path(path)
    if offset < 0:
        raise DatasetError(f"{label}: offset must be >= 0, got {offset}")
    if limit is not None and limit < 0:
        raise DatasetError(f"{label}: limit must be >= 0 (or None for all rows), got {limit}")
    return _iter_rows(p, label, limit, offset)


def _iter_rows(p: Path, label: str, limit: int | None, offset: int) -> Iterator[DatasetRow]:
    if limit == 0:
        return
    n = 0
    for item in iter_records(p, label, skip=offset):
        if item.issue is not None:
            raise DatasetRowError(item.issue)
        yield build_row(
            item.record,
            row_index=n,
            source_row_index=item.source_row_index,
            file=label,
            line=item.line,
        )
        n += 1
        if limit is not None and n >= limit:
            return


def count_rows(path: str | PathLike[str]) -> int:
    """The number of data rows in a dataset file (rows are counted, not validated)."""
    p, label = check_path(path)
    return count_records(p, label)


class DatasetReport(BaseModel):
    """What :func:`validate_dataset` found. JSON-able with ``report.model_dump(mode="json")``."""

    model_config = ConfigDict(extra="forbid")

    path: str
    format: str = Field(description="The file suffix without the dot: jsonl, json, csv, parquet.")
    rows: int = Field(description="Data rows read (valid or not).")
    valid_rows: int
    error_count: int = Field(description="Every problem found, including those not listed.")
    errors: list[DatasetIssue] = Field(description="The first problems found, in file order.")
    columns: list[str] = Field(description="Every column seen, in first-seen order.")
    has_label: bool = Field(description="Whether any row has a ground_truth/label.")
    warnings: list[str] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every row is valid and there is at least one row."""
        return self.error_count == 0 and self.valid_rows > 0

    def summary(self) -> str:
        """A one-line summary, e.g. ``data/x.jsonl: 100 rows, 2 errors``."""
        state = "ok" if self.ok else f"{self.error_count} error(s)"
        return f"{self.path}: {self.rows} rows ({self.valid_rows} valid), {state}"

    def lines(self) -> list[str]:
        """Human-readable lines: the summary, each listed error, then the warnings."""
        out = [self.summary(), *(f"  {e}" for e in self.errors)]
        hidden = self.error_count - len(self.errors)
        if hidden > 0:
            out.append(f"  ... and {hidden} more error(s)")
        out.extend(f"  warning: {w}" for w in self.warnings)
        return out


def _scan(p: Path, label: str) -> Iterator[RawRecord]:
    try:
        yield from iter_records(p, label)
    except DatasetRowError as exc:  # the file cannot be opened as its format at all
        yield RawRecord(0, None, issue=exc.issue, fatal=True)


def validate_dataset(path: str | PathLike[str], *, max_errors: int = 5) -> DatasetReport:
    """Read a whole dataset and report every problem (listing the first ``max_errors``).

    Unlike :func:`read_dataset`, it does not stop at the first bad row. A problem that makes
    the rest of the file unreadable (a JSON syntax error inside a ``.json`` array, a bad CSV
    header) ends the scan.

    Raises:
        DatasetError: the file is missing or its format unsupported.
    """
    p, label = check_path(path)
    errors: list[DatasetIssue] = []
    error_count = rows = valid = 0
    columns: dict[str, None] = {}
    has_label = False

    def add(issue: DatasetIssue) -> None:
        nonlocal error_count
        error_count += 1
        if len(errors) < max_errors:
            errors.append(issue)

    for item in _scan(p, label):
        if item.issue is not None:
            add(item.issue)
            if item.fatal:
                break
            rows += 1
            continue
        rows += 1
        if isinstance(item.record, dict):
            columns.update(dict.fromkeys(item.record))
        try:
            row = build_row(item.record, row_index=rows - 1, source_row_index=item.source_row_index,
                            file=label, line=item.line)
        except DatasetRowError as exc:
            add(exc.issue)
            continue
        valid += 1
        has_label = has_label or row.label is not None
    warnings = []
    if rows == 0 and error_count == 0:
        add(DatasetIssue(file=label, message="the dataset has no rows"))
    if valid and not has_label:
        warnings.append("no row has a 'ground_truth' column: graders will get ctx.label = None")
    return DatasetReport(
        path=label, format=p.suffix.lower().lstrip("."), rows=rows, valid_rows=valid,
        error_count=error_count, errors=errors, columns=list(columns), has_label=has_label,
        warnings=warnings,
    )


