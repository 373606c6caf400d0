"""One dataset row, and the rules that turn a raw record (JSON object, CSV record, parquet row)
into it."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

from pydantic import BaseModel, ConfigDict

from osmosis_ai.errors import DatasetError
from osmosis_ai.rollout._types import Message

__all__ = ["PROMPT_COLUMNS", "DatasetIssue", "DatasetRow", "DatasetRowError", "build_row"]

PROMPT_COLUMNS = ("system_prompt", "user_prompt", "ground_truth", "label")
"""Columns with a meaning; every other column is kept as row metadata."""


@dataclass(frozen=True, eq=False)
class DatasetRow:
    """One dataset row, normalised.

    Attributes:
        row_index: position in the selection (after ``offset``), from 0.
        source_row_index: position among the file's data rows, from 0 (header and blank lines
            are not rows).
        prompt: chat messages: the optional system message, then the user message.
        label: the row's ``ground_truth`` (or ``label``) as a string; ``None`` when absent.
        metadata: every other column, as read.
        system_prompt: the ``system_prompt`` column, or ``None``.
        user_prompt: the ``user_prompt`` column.
    """

    row_index: int
    source_row_index: int
    prompt: list[Message]
    label: str | None
    metadata: dict[str, Any] = field(default_factory=dict)
    system_prompt: str | None = None
    user_prompt: str = ""


class DatasetIssue(BaseModel):
    """One problem found in a dataset, with where it is.

    ``str(issue)`` is the one-line message (``file:line:column: ...``) used in errors.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    file: str
    message: str
    line: int | None = None
    """1-based line in the file (JSON, JSONL, CSV)."""
    char: int | None = None
    """1-based character column on that line, when known (JSON syntax errors)."""
    row: int | None = None
    """0-based data row index in the file."""
    column: str | None = None
    """The dataset column (field) the problem is in."""

    def __str__(self) -> str:
        where = self.file
        if self.line is not None:
            where += f":{self.line}"
            if self.char is not None:
                where += f":{self.char}"
        parts = [where]
        if self.row is not None:
            parts.append(f"row {self.row}")
        if self.column is not None:
            parts.append(f"column '{self.column}'")
        return ": ".join(parts) + f": {self.message}"


class DatasetRowError(DatasetError):
    """A :class:`DatasetError` that carries the :class:`DatasetIssue` it reports."""

    def __init__(self, issue: DatasetIssue) -> None:
        self.issue = issue
        super().__init__(str(issue))


def _describe(value: Any) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


def _label(record: dict[str, Any], fail: Callable[[str | None, str], NoReturn]) -> str | None:
    if "ground_truth" in record and "label" in record:
        if record["label"] is not None and record["ground_truth"] is not None:
            fail(
                "label",
                "the row has both 'ground_truth' and its alias 'label'; keep only 'ground_truth'",
            )
    value = record.get("ground_truth")
    column = "ground_truth"
    if value is None and record.get("label") is not None:
        value, column = record["label"], "label"
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool | int | float):
        return str(value)
    if isinstance(value, dict | list):
        # Graders get a string label; structured answers travel as JSON they can parse back.
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    fail(column, f"expected a string, number or JSON value, got {_describe(value)}")


def build_row(
    record: Any,
    *,
    row_index: int,
    source_row_index: int,
    file: str,
    line: int | None = None,
) -> DatasetRow:
    """Validate one raw record and turn it into a :class:`DatasetRow`.

    Raises:
        DatasetRowError: the record is not an object, ``user_prompt`` is missing, empty or not a
            string, ``system_prompt`` is not a string, or the label has an unusable type.
    """

    def fail(column: str | None, message: str) -> NoReturn:
        raise DatasetRowError(
            DatasetIssue(file=file, line=line, row=source_row_index, column=column, message=message)
        )

    if not isinstance(record, dict):
        fail(None, f"expected a JSON object with a 'user_prompt' key, got {_describe(record)}")
    if "user_prompt" not in record:
        present = ", ".join(repr(k) for k in list(record)[:8]) or "none"
        fail(
            "user_prompt",
            f"missing; every row needs a non-empty 'user_prompt' string (columns found: {present})",
        )
    user = record["user_prompt"]
    if not isinstance(user, str):
        fail("user_prompt", f"expected a non-empty string, got {_describe(user)}")
    if not user.strip():
        fail("user_prompt", "empty prompt; expected a non-empty string")
    system = record.get("system_prompt")
    if system is not None and not isinstance(system, str):
        fail("system_prompt", f"expected a string (or no value), got {_describe(system)}")
    if isinstance(system, str) and not system.strip():
        system = None
    label = _label(record, fail)
    prompt: list[Message] = []
    if system is not None:
        prompt.append({"role": "system", "content": system})
    prompt.append({"role": "user", "content": user})
    metadata = {k: v for k, v in record.items() if k not in PROMPT_COLUMNS}
    return DatasetRow(
        row_index=row_index,
        source_row_index=source_row_index,
        prompt=prompt,
        label=label,
        metadata=metadata,
        system_prompt=system,
        user_prompt=user,
    )
