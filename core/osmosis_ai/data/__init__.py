"""Datasets: read ``.jsonl``, ``.json``, ``.csv`` and ``.parquet`` rows lazily and validate them.

Columns: ``user_prompt`` (required), ``system_prompt`` (optional), ``ground_truth`` (optional,
alias ``label``; becomes ``ctx.label``); every other column is kept in ``row.metadata``::

    from osmosis_ai.data import read_dataset

    for row in read_dataset("data/multiply.jsonl", limit=10):
        print(row.row_index, row.prompt, row.label)
"""

from __future__ import annotations

from osmosis_ai.data._dataset import DatasetReport, count_rows, read_dataset, validate_dataset
from osmosis_ai.data._demos import (
    Demonstration,
    DemonstrationReport,
    load_demonstrations,
    looks_like_demonstrations,
    validate_demonstrations,
)
from osmosis_ai.data._readers import SUPPORTED_SUFFIXES
from osmosis_ai.data._row import DatasetIssue, DatasetRow, DatasetRowError

__all__ = [
    "SUPPORTED_SUFFIXES",
    "DatasetIssue",
    "DatasetReport",
    "DatasetRow",
    "DatasetRowError",
    "Demonstration",
    "DemonstrationReport",
    "count_rows",
    "load_demonstrations",
    "looks_like_demonstrations",
    "read_dataset",
    "validate_dataset",
    "validate_demonstrations",
]
