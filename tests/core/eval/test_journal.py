"""The fsynced results journal and the fingerprints --resume checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from osmosis_ai.errors import OsmosisError
from osmosis_ai.eval import EvalRecord, Journal, hash_file, hash_rollout_dir, read_journal


def _rec(row: int) -> EvalRecord:
    return EvalRecord(
        row_index=row, run_index=0, rollout_id=f"r{row}", status="success", reward=1.0
    )


def test_journal_appends_and_reads_back(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    with Journal(path) as journal:
        journal.append(_rec(0))
        journal.append(_rec(1))
    with Journal(path) as journal:  # reopening appends, never truncates
        journal.append(_rec(2))
    assert [r.row_index for r in read_journal(path)] == [0, 1, 2]


def test_a_cut_short_last_line_is_dropped_and_repaired(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    with Journal(path) as journal:
        journal.append(_rec(0))
    with path.open("a") as fh:
        fh.write('{"row_index": 1, "run_ind')  # the process died mid-write
    assert [r.row_index for r in read_journal(path)] == [0]
    assert path.read_text().endswith('"ru' + "n_ind")  # not repaired unless asked
    assert [r.row_index for r in read_journal(path, repair=True)] == [0]
    assert path.read_text().endswith("\n")
    with Journal(path) as journal:
        journal.append(_rec(1))
    assert [r.row_index for r in read_journal(path)] == [0, 1]


def test_a_damaged_complete_line_is_an_error_naming_the_line(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text(_rec(0).model_dump_json() + "\nnot json\n")
    with pytest.raises(OsmosisError, match=r"results.jsonl:2: not a valid result record"):
        read_journal(path)


def test_missing_journal_reads_empty(tmp_path: Path) -> None:
    assert read_journal(tmp_path / "nope.jsonl") == []


def test_rollout_hash_tracks_code_but_not_caches(tmp_path: Path) -> None:
    rollout = tmp_path / "rollouts" / "calc"
    rollout.mkdir(parents=True)
    (rollout / "main.py").write_text("x = 1\n")
    (rollout / "tools.py").write_text("y = 2\n")
    first = hash_rollout_dir(rollout)
    (rollout / "__pycache__").mkdir()
    (rollout / "__pycache__" / "main.cpython-311.pyc").write_bytes(b"\0\1")
    (rollout / ".venv").mkdir()
    (rollout / ".venv" / "thing.py").write_text("ignored")
    assert hash_rollout_dir(rollout) == first
    (rollout / "tools.py").write_text("y = 3\n")
    assert hash_rollout_dir(rollout) != first
    (rollout / "tools.py").write_text("y = 2\n")
    assert hash_rollout_dir(rollout) == first
    (rollout / "tools.py").rename(rollout / "tools2.py")  # a rename changes the code too
    assert hash_rollout_dir(rollout) != first


def test_hash_file(tmp_path: Path) -> None:
    a = tmp_path / "a.jsonl"
    a.write_text('{"user_prompt": "x"}\n')
    h = hash_file(a)
    assert len(h) == 64 and hash_file(a) == h
    a.write_text('{"user_prompt": "y"}\n')
    assert hash_file(a) != h
