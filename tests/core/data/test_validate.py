from __future__ import annotations

import json
from pathlib import Path

import pytest

from osmosis_ai.data import validate_dataset
from osmosis_ai.errors import DatasetError


def test_valid_dataset_report(tmp_path: Path) -> None:
    f = tmp_path / "ok.jsonl"
    f.write_text("".join(
        json.dumps({"user_prompt": f"q{i}", "ground_truth": str(i), "k": i}) + "\n" for i in range(4)
    ))
    report = validate_dataset(f)
    assert report.ok
    assert (report.rows, report.valid_rows, report.error_count) == (4, 4, 0)
    assert report.columns == ["user_prompt", "ground_truth", "k"]
    assert report.format == "jsonl" and report.has_label and report.warnings == []
    assert report.summary() == f"{f}: 4 rows (4 valid), ok"


def test_report_lists_first_errors_and_counts_all(tmp_path: Path) -> None:
    f = tmp_path / "bad.jsonl"
    lines = [json.dumps({"user_prompt": "fine"})]
    lines += ["{oops"] * 3
    lines += [json.dumps({"user_prompt": ""})] * 4
    f.write_text("\n".join(lines) + "\n")
    report = validate_dataset(f, max_errors=5)
    assert not report.ok
    assert (report.rows, report.valid_rows, report.error_count) == (8, 1, 7)
    assert len(report.errors) == 5
    assert str(report.errors[0]) == (
        f"{f}:2:2: row 1: invalid JSON: Expecting property name enclosed in double quotes"
    )
    assert str(report.errors[3]) == (
        f"{f}:5: row 4: column 'user_prompt': empty prompt; expected a non-empty string"
    )
    text = report.lines()
    assert text[0] == f"{f}: 8 rows (1 valid), 7 error(s)"
    assert "  ... and 2 more error(s)" in text
    assert "  warning: no row has a 'ground_truth' column: graders will get ctx.label = None" in text


def test_report_is_json_serialisable(tmp_path: Path) -> None:
    f = tmp_path / "d.csv"
    f.write_text("user_prompt,ground_truth\n,1\n")
    data = json.loads(json.dumps(validate_dataset(f).model_dump(mode="json")))
    assert data["error_count"] == 1
    assert data["errors"][0] == {
        "file": str(f), "message": "empty prompt; expected a non-empty string", "line": 2,
        "char": None, "row": 0, "column": "user_prompt",
    }


def test_fatal_error_stops_the_scan(tmp_path: Path) -> None:
    f = tmp_path / "d.json"
    f.write_text('[{"user_prompt": "a"}, {"user_prompt": }, {"user_prompt": "c"}]')
    report = validate_dataset(f)
    assert report.error_count == 1 and report.valid_rows == 1
    assert "d.json:1:40: row 1: invalid JSON: Expecting value" in str(report.errors[0])


def test_empty_dataset_is_an_error(tmp_path: Path) -> None:
    f = tmp_path / "d.jsonl"
    f.write_text("\n\n")
    report = validate_dataset(f)
    assert not report.ok
    assert [str(e) for e in report.errors] == [f"{f}: the dataset has no rows"]


def test_missing_file_raises(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="dataset file not found"):
        validate_dataset(tmp_path / "x.csv")


def test_unreadable_parquet_is_reported(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    f = tmp_path / "d.parquet"
    f.write_text("not parquet at all")
    report = validate_dataset(f)
    assert not report.ok and report.error_count == 1
    assert str(report.errors[0]).startswith(f"{f}: not a readable parquet file: ")


def corrupt_parquet(path: Path) -> Path:
    """A snappy parquet file of 3 row groups whose second group's first page is garbled (the
    footer and the other groups intact): pyarrow reads group 0, then raises
    ``OSError: Corrupt snappy compressed data.``"""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rows = [f"question {i}: " + "word " * (5 + i % 37) for i in range(300)]
    pq.write_table(
        pa.table({"user_prompt": rows, "ground_truth": [str(i) for i in range(300)]}),
        path,
        row_group_size=100,
        compression="snappy",
    )
    chunk = pq.ParquetFile(path).metadata.row_group(1).column(0)
    start = (chunk.dictionary_page_offset or chunk.data_page_offset) + 20
    data = bytearray(path.read_bytes())
    for i in range(start, start + 8):
        data[i] ^= 0xA5
    path.write_bytes(bytes(data))
    return path


def test_a_damaged_parquet_page_is_a_located_error(tmp_path: Path) -> None:
    f = corrupt_parquet(tmp_path / "d.parquet")
    report = validate_dataset(f)
    assert not report.ok and report.error_count == 1 and report.valid_rows == 100
    message = str(report.errors[0])
    assert message.startswith(f"{f}: row 100: row group 1 (rows 100..199): ")
    assert "Corrupt snappy compressed data" in message and "write it again" in message
