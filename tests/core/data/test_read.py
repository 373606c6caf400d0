from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import osmosis_ai.data._readers as readers
from osmosis_ai.data import DatasetRowError, count_rows, read_dataset
from osmosis_ai.errors import DatasetError, MissingExtraError


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def jsonl(path: Path, rows: list[object]) -> Path:
    return write(path, "".join(json.dumps(r) + "\n" for r in rows))


def test_jsonl_rows_become_prompts_labels_and_metadata(tmp_path: Path) -> None:
    f = jsonl(tmp_path / "d.jsonl", [
        {"system_prompt": "be brief", "user_prompt": "2*3?", "ground_truth": 6, "topic": "math"},
        {"user_prompt": "hi", "label": "hello", "system_prompt": ""},
        {"user_prompt": "no label", "extra": [1, 2]},
    ])
    rows = list(read_dataset(f))
    assert rows[0].prompt == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "2*3?"},
    ]
    assert rows[0].label == "6"
    assert rows[0].metadata == {"topic": "math"}
    assert rows[0].system_prompt == "be brief" and rows[0].user_prompt == "2*3?"
    assert rows[1].label == "hello"  # 'label' is an alias of ground_truth
    assert rows[1].prompt == [{"role": "user", "content": "hi"}]  # empty system prompt dropped
    assert rows[2].label is None and rows[2].metadata == {"extra": [1, 2]}


def test_structured_ground_truth_travels_as_json(tmp_path: Path) -> None:
    f = jsonl(tmp_path / "d.jsonl", [{"user_prompt": "q", "ground_truth": {"b": 1, "a": [2]}}])
    (row,) = read_dataset(f)
    assert json.loads(row.label or "") == {"a": [2], "b": 1}


def test_offset_and_limit_select_rows_and_keep_source_indices(tmp_path: Path) -> None:
    f = write(tmp_path / "d.jsonl", "".join(
        json.dumps({"user_prompt": f"q{i}"}) + "\n" + ("\n" if i == 1 else "") for i in range(6)
    ))
    rows = list(read_dataset(f, offset=2, limit=3))
    assert [r.user_prompt for r in rows] == ["q2", "q3", "q4"]
    assert [r.row_index for r in rows] == [0, 1, 2]
    assert [r.source_row_index for r in rows] == [2, 3, 4]
    assert list(read_dataset(f, limit=0)) == []
    assert [r.user_prompt for r in read_dataset(f, offset=5)] == ["q5"]


def test_reading_is_lazy(tmp_path: Path) -> None:
    # Only the first line is valid: a lazy reader hands it out without touching the rest.
    f = write(tmp_path / "d.jsonl", json.dumps({"user_prompt": "ok"}) + "\n{broken\n")
    it = read_dataset(f)
    assert next(it).user_prompt == "ok"
    with pytest.raises(DatasetError, match=r"d\.jsonl:2:2: row 1: invalid JSON"):
        next(it)


def test_offset_skips_unparsed_rows(tmp_path: Path) -> None:
    f = write(tmp_path / "d.jsonl", "{broken\n" + json.dumps({"user_prompt": "ok"}) + "\n")
    assert [r.user_prompt for r in read_dataset(f, offset=1)] == ["ok"]


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"prompt": "x"}, "row 0: column 'user_prompt': missing; every row needs a non-empty "
                          "'user_prompt' string (columns found: 'prompt')"),
        ({"user_prompt": 42}, "row 0: column 'user_prompt': expected a non-empty string, got int 42"),
        ({"user_prompt": "  "}, "row 0: column 'user_prompt': empty prompt"),
        ({"user_prompt": "q", "system_prompt": 3}, "column 'system_prompt': expected a string"),
        ({"user_prompt": "q", "ground_truth": "a", "label": "b"},
         "column 'label': the row has both 'ground_truth' and its alias 'label'"),
        ([1, 2], "row 0: expected a JSON object with a 'user_prompt' key, got list [1, 2]"),
    ],
)
def test_row_errors_name_file_line_row_and_column(
    tmp_path: Path, record: object, message: str
) -> None:
    f = jsonl(tmp_path / "bad.jsonl", [record])
    with pytest.raises(DatasetRowError) as info:
        list(read_dataset(f))
    assert str(info.value).startswith(f"{f}:1: ")
    assert message in str(info.value)
    assert info.value.issue.line == 1 and info.value.issue.row == 0


def test_jsonl_syntax_error_has_line_and_column(tmp_path: Path) -> None:
    f = write(tmp_path / "d.jsonl", '{"user_prompt": "a"}\n{"user_prompt": "b",}\n')
    with pytest.raises(DatasetError) as info:
        list(read_dataset(f))
    assert str(info.value) == (
        f"{f}:2:21: row 1: invalid JSON: Expecting property name enclosed in double quotes"
    )


def test_missing_file_and_unknown_format(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"nope\.jsonl: dataset file not found"):
        read_dataset(tmp_path / "nope.jsonl")
    bad = write(tmp_path / "d.txt", "x")
    with pytest.raises(DatasetError, match=r"unsupported dataset format '\.txt'; use one of "
                                           r"\.jsonl, \.json, \.csv, \.parquet"):
        read_dataset(bad)
    f = jsonl(tmp_path / "d.jsonl", [{"user_prompt": "a"}])
    with pytest.raises(DatasetError, match="offset must be >= 0, got -1"):
        read_dataset(f, offset=-1)
    with pytest.raises(DatasetError, match="limit must be >= 0"):
        read_dataset(f, limit=-2)


def test_csv_reader(tmp_path: Path) -> None:
    f = write(tmp_path / "d.csv", (
        "system_prompt,user_prompt,ground_truth,source\n"
        ',"multi\nline question",42,web\n'
        "sys,q2,,book\n"
    ))
    rows = list(read_dataset(f))
    assert rows[0].user_prompt == "multi\nline question" and rows[0].label == "42"
    assert rows[0].system_prompt is None and rows[0].metadata == {"source": "web"}
    assert rows[1].label is None  # an empty cell is "no value"
    assert rows[1].prompt[0] == {"role": "system", "content": "sys"}
    assert count_rows(f) == 2


def test_csv_errors(tmp_path: Path) -> None:
    f = write(tmp_path / "d.csv", 'user_prompt,ground_truth\n"a\nb",1\nq,2,extra\n')
    with pytest.raises(DatasetError) as info:
        list(read_dataset(f))
    assert str(info.value) == f"{f}:4: row 1: the record has 3 fields but the header has 2"
    g = write(tmp_path / "g.csv", "question,answer\nq,1\n")
    with pytest.raises(DatasetError) as info:
        list(read_dataset(g))
    assert str(info.value) == (
        f"{g}:1: column 'user_prompt': missing column; the header has: question, answer"
    )
    h = write(tmp_path / "h.csv", "")
    with pytest.raises(DatasetError, match=r"h\.csv:1: empty CSV file"):
        list(read_dataset(h))


def test_json_array_reader(tmp_path: Path) -> None:
    rows = [{"user_prompt": f"q{i}", "ground_truth": i} for i in range(5)]
    f = write(tmp_path / "d.json", json.dumps(rows, indent=2))
    got = list(read_dataset(f, offset=1, limit=2))
    assert [(r.user_prompt, r.label, r.source_row_index) for r in got] == [
        ("q1", "1", 1), ("q2", "2", 2)
    ]
    assert count_rows(f) == 5
    assert list(read_dataset(write(tmp_path / "e.json", " [ ] "))) == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"user_prompt": "a"}', ":1:1: expected a JSON array of row objects"),
        ('[\n  {"user_prompt": "a"},\n  {"user_prompt": tru}\n]', ":3:19: row 1: invalid JSON: "
                                                                  "Expecting value"),
        ('[{"user_prompt": "a"} {"user_prompt": "b"}]', ":1:23: invalid JSON: expected ',' or ']' after row 0"),
        ('[{"user_prompt": "a"}] x', ":1:24: invalid JSON: extra data after the closing ']'"),
        ('[{"user_prompt": "a"}, {"user_prompt": "b', ": row 1: invalid JSON: Unterminated string"),
    ],
)
def test_json_array_errors(tmp_path: Path, text: str, message: str) -> None:
    f = write(tmp_path / "d.json", text)
    with pytest.raises(DatasetError) as info:
        list(read_dataset(f))
    assert str(info.value).startswith(str(f))
    assert message in str(info.value)


_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**20, 10**20) | st.floats(allow_nan=False,
    allow_infinity=False) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                max_size=3),
    max_leaves=8,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    metas=st.lists(_values, min_size=0, max_size=12),
    chunk=st.integers(1, 64),
    indent=st.sampled_from([None, 0, 2]),
)
def test_incremental_json_parser_matches_json_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, metas: list[object], chunk: int,
    indent: int | None,
) -> None:
    # Tiny chunks split numbers, strings and literals at every possible place.
    monkeypatch.setattr(readers, "_CHUNK", chunk)
    rows = [{"user_prompt": f"q{i}", "m": m} for i, m in enumerate(metas)]
    f = write(tmp_path / "h.json", json.dumps(rows, indent=indent, ensure_ascii=False))
    got = list(read_dataset(f))
    assert [r.metadata["m"] for r in got] == [r["m"] for r in json.loads(f.read_text())]


def test_json_error_location_survives_chunking(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(readers, "_CHUNK", 7)
    lines = ["["] + [f'  {{"user_prompt": "q{i}"}},' for i in range(40)] + ['  {"user_prompt": nul}', "]"]
    f = write(tmp_path / "d.json", "\n".join(lines))
    with pytest.raises(DatasetError, match=r"d\.json:42:19: row 40: invalid JSON: Expecting value"):
        list(read_dataset(f))


def _parquet(tmp_path: Path, n: int, group: int) -> Path:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    table = pa.table({
        "user_prompt": [f"q{i}" for i in range(n)],
        "ground_truth": [str(i) for i in range(n)],
        "difficulty": list(range(n)),
    })
    path = tmp_path / "d.parquet"
    pq.write_table(table, path, row_group_size=group)
    return path


def test_parquet_reads_by_row_groups(tmp_path: Path) -> None:
    f = _parquet(tmp_path, 10, 3)
    rows = list(read_dataset(f, offset=4, limit=4))
    assert [(r.user_prompt, r.label, r.source_row_index, r.row_index) for r in rows] == [
        ("q4", "4", 4, 0), ("q5", "5", 5, 1), ("q6", "6", 6, 2), ("q7", "7", 7, 3)
    ]
    assert rows[0].metadata == {"difficulty": 4}
    assert count_rows(f) == 10
    assert list(read_dataset(f, offset=10)) == []


def test_parquet_row_error_names_the_row(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "d.parquet"
    pq.write_table(pa.table({"user_prompt": ["a", ""]}), path)
    with pytest.raises(DatasetError) as info:
        list(read_dataset(path))
    assert str(info.value) == f"{path}: row 1: column 'user_prompt': empty prompt; expected a non-empty string"


def test_parquet_without_pyarrow_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = write(tmp_path / "d.parquet", "not really parquet")
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(MissingExtraError) as info:
        list(read_dataset(f))
    assert 'pip install "osmosis-ai[parquet]"' in str(info.value)
    assert "Reading parquet needs the 'pyarrow' package" in str(info.value)


def test_count_rows_jsonl_ignores_blank_lines(tmp_path: Path) -> None:
    f = write(tmp_path / "d.jsonl", '{"user_prompt": "a"}\n\n  \n{"user_prompt": "b"}')
    assert count_rows(f) == 2
