"""Demonstrations (``[warm_start]`` rows): checked without torch, every problem at file:line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from osmosis_ai.data import (
    DatasetRowError,
    load_demonstrations,
    looks_like_demonstrations,
    validate_demonstrations,
)
from osmosis_ai.errors import DatasetError


def call(cid: str, name: str, args: object) -> dict[str, object]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


GOOD = {
    "messages": [
        {"role": "system", "content": "Use the tools."},
        {"role": "user", "content": [{"type": "text", "text": "What is 2 + 3 * 4?"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [call("c1", "mul", '{"a": 3, "b": 4}')],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "12"},
        {"role": "assistant", "content": "", "tool_calls": [call("c2", "add", {"a": 2, "b": 12})]},
        {"role": "tool", "tool_call_id": "c2", "content": "14"},
        {"role": "assistant", "content": "14"},
    ],
    "tools": [{"type": "function", "function": {"name": "add", "parameters": {}}}],
    "reward": 1,
    "source": "eval:calc/0/0",
    "other": "ignored",
}

BAD = [
    ({"messages": [{"role": "robot", "content": "x"}]}, "unknown role 'robot'"),
    (
        {
            "messages": [
                {"role": "user", "content": "x"},
                {"role": "tool", "tool_call_id": "c9", "content": "1"},
            ]
        },
        "tool_call_id 'c9' follows no assistant call",
    ),
    (
        {"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": ""}]},
        "needs content or tool_calls",
    ),
    (
        {
            "messages": [
                {"role": "user", "content": "x"},
                {"role": "assistant", "tool_calls": [call("c1", "add", "{a: 1}")]},
            ]
        },
        "arguments are not JSON",
    ),
    ({"messages": [{"role": "user", "content": "x"}]}, "no assistant message"),
    ({"messages": []}, "missing 'messages'"),
    (
        {
            "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}],
            "reward": "high",
        },
        "reward must be a number",
    ),
]


def write(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "demos.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_good_row_is_normalised(tmp_path: Path) -> None:
    path = write(tmp_path, [json.dumps(GOOD)])
    rows, problems = load_demonstrations(path)
    assert problems == []
    (row,) = rows
    assert row.line == 1 and row.reward == 1.0 and row.source == "eval:calc/0/0"
    assert row.assistant_turns == 3
    # a dict of arguments becomes the JSON string the engine renders
    assert row.messages[4]["tool_calls"][0]["function"]["arguments"] == '{"a": 2, "b": 12}'
    assert row.messages[1]["content"] == [{"type": "text", "text": "What is 2 + 3 * 4?"}]
    assert "name" not in row.messages[3]  # nothing added that a template might render


@pytest.mark.parametrize(("record", "needle"), BAD)
def test_bad_rows_are_located_and_skipped(tmp_path: Path, record: object, needle: str) -> None:
    path = write(tmp_path, [json.dumps(GOOD), "", json.dumps(record)])
    rows, problems = load_demonstrations(path)
    assert [r.line for r in rows] == [1]
    (problem,) = problems
    assert str(problem).startswith(f"{path}:3: ") and needle in str(problem)
    with pytest.raises(DatasetRowError, match=rf"^{path}:3: .*{needle}"):
        load_demonstrations(path, on_bad_row="error")


def test_malformed_json_and_report_counts(tmp_path: Path) -> None:
    path = write(tmp_path, [json.dumps(GOOD), '{"messages": [', json.dumps(BAD[0][0])])
    report = validate_demonstrations(path)
    assert (report.rows, report.valid_rows, report.error_count) == (3, 1, 2)
    assert report.problem_counts == {"bad_json": 1, "unknown_role": 1}
    assert (report.assistant_turns, report.tool_calls) == (3, 2)
    assert str(report.errors[0]).startswith(f"{path}:2:")
    assert not report.ok


def test_integers_past_the_digit_limit_are_located_not_raised(tmp_path: Path) -> None:
    # json.loads raises a plain ValueError (not JSONDecodeError) for ints over 4,300 digits.
    huge = "9" * 5000
    huge_args = json.loads(json.dumps(GOOD))
    huge_args["messages"][2]["tool_calls"][0]["function"]["arguments"] = '{"a": ' + huge + "}"
    path = write(tmp_path, [json.dumps(GOOD), '{"messages": [], "n": ' + huge + "}"])
    path.write_text(path.read_text() + json.dumps(huge_args) + "\n")
    assert looks_like_demonstrations(path)
    report = validate_demonstrations(path)
    assert report.problem_counts == {"bad_json": 1, "bad_arguments": 1}
    assert [str(e).split(": ")[0] for e in report.errors] == [f"{path}:2", f"{path}:3"]
    assert not looks_like_demonstrations(write(tmp_path, ['{"messages": ' + huge + "}"]))


def test_missing_file_is_a_dataset_error(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="not found"):
        load_demonstrations(tmp_path / "none.jsonl")


def test_dataset_validate_checks_demonstrations(tmp_path: Path) -> None:
    from osmosis_ai.cli import app

    good = write(tmp_path, [json.dumps(GOOD)])
    assert looks_like_demonstrations(good)
    result = CliRunner().invoke(app, ["dataset", "validate", str(good)])
    assert result.exit_code == 0, result.output
    assert "1 demonstrations (1 valid, 3 assistant turns, 2 tool calls)" in result.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(GOOD) + "\n" + json.dumps(BAD[0][0]) + "\n")
    result = CliRunner().invoke(app, ["dataset", "validate", str(bad)])
    assert result.exit_code == 1
    assert f"{bad}:2: messages[0]: unknown role 'robot'" in result.output
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"user_prompt": "hi"}\n')
    assert not looks_like_demonstrations(prompts)
