"""The strands template's data: made by its own script from its own tools, and shipped as made.

Demonstrations are one-operation conversations shaped as Strands sends them (system prompt,
question, one tool call, the tool's result, the final number); the RL and held-out rows are
calculations of two or three operations over as many turns ("What is 113 * 24?", then "What is
the result - 523?"), which the demonstrations never show.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest

from osmosis_ai.data import load_demonstrations
from osmosis_ai.templates import create_from_template

pytest.importorskip("strands")

_ONE_OP = re.compile(r"^What is (\d{2,4}) ([-+*/]) (\d{2,4})\?$")
_GIVEN = re.compile(
    r"^(?:The result is (?P<a1>\d{2,4})\. )?What is the result (?P<op>[-+*/]) (?P<b>\d{2,4})\?"
    r"(?: The result is (?P<a2>\d{2,4})\.)?$"
)
_FOLLOW_UP = re.compile(r"^What is the result ([-+*/]) (\d+)\?$")


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ws")
    create_from_template("strands", "calc", root)
    return root


@pytest.fixture(scope="module")
def made(ws: Path) -> dict[str, list[dict[str, Any]]]:
    spec = importlib.util.spec_from_file_location("make_data", ws / "rollouts/calc/make_data.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rows: dict[str, list[dict[str, Any]]] = module.generate()
    return rows


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_shipped_files_are_what_the_script_makes(
    ws: Path, made: dict[str, list[dict[str, Any]]]
) -> None:
    # If this fails after a change to main.py or make_data.py, regenerate the template's files:
    #   python templates/strands/make_data.py --out /tmp/d --name x && \
    #   cp /tmp/d/x_demos.jsonl templates/strands/demos.jsonl && ... (data, heldout)
    assert _jsonl(ws / "data/calc_demos.jsonl") == made["demos"]
    assert _jsonl(ws / "data/calc.jsonl") == made["train"]
    assert _jsonl(ws / "data/calc_heldout.jsonl") == made["heldout"]


def test_the_script_writes_the_workspace_files(ws: Path, tmp_path: Path) -> None:
    import subprocess
    import sys

    out = tmp_path / "data"
    subprocess.run(
        [sys.executable, str(ws / "rollouts/calc/make_data.py"), "--out", str(out)],
        check=True, capture_output=True,
    )
    for name in ("calc_demos.jsonl", "calc.jsonl", "calc_heldout.jsonl"):
        assert (out / name).read_bytes() == (ws / "data" / name).read_bytes()


def test_demonstrations_are_right_one_call_conversations_as_strands_sends_them(
    ws: Path,
) -> None:
    main = (ws / "rollouts/calc/main.py").read_text()
    demos, problems = load_demonstrations(ws / "data/calc_demos.jsonl")
    assert problems == [] and len(demos) == 64
    ops = {"+": "add", "-": "subtract", "*": "multiply", "/": "divide"}
    for demo in demos:
        system, user, call, result, answer = demo.messages
        assert system["role"] == "system" and system["content"] in main.replace('"\n    "', "")
        question = user["content"][0]["text"]
        m, g = _ONE_OP.match(question), _GIVEN.match(question)
        if m is not None:
            a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
        else:  # the first number given as "the result", before or after the question
            assert g is not None and bool(g["a1"]) != bool(g["a2"]), question
            a, op, b = int(g["a1"] or g["a2"]), g["op"], int(g["b"])
        (tool_call,) = call["tool_calls"]
        assert tool_call["function"]["name"] == ops[op]
        assert json.loads(tool_call["function"]["arguments"]) == {"a": a, "b": b}
        value = {"+": a + b, "-": a - b, "*": a * b, "/": a / b}[op]
        assert result["role"] == "tool" and result["tool_call_id"] == tool_call["id"]
        number = result["content"].removeprefix("The result is ").removesuffix(".")
        assert result["content"] == f"The result is {number}." and float(number) == value
        assert answer["content"] == number
        names = [t["function"]["name"] for t in demo.tools or []]
        assert names == ["add", "subtract", "multiply", "divide"]


def test_rl_and_heldout_rows_are_multi_step_and_disjoint(ws: Path) -> None:
    demos = {json.dumps(d["messages"][1]["content"]) for d in _jsonl(ws / "data/calc_demos.jsonl")}
    train = _jsonl(ws / "data/calc.jsonl")
    heldout = _jsonl(ws / "data/calc_heldout.jsonl")
    assert len(heldout) >= 24
    apply = {"+": float.__add__, "-": float.__sub__, "*": float.__mul__, "/": float.__truediv__}
    for row in train + heldout:
        m = _ONE_OP.match(row["user_prompt"])
        assert m is not None, row
        assert 1 <= len(row["follow_ups"]) <= 2, row  # two or three operations
        value = apply[m.group(2)](float(m.group(1)), float(m.group(3)))
        for follow_up in row["follow_ups"]:
            f = _FOLLOW_UP.match(follow_up)
            assert f is not None, follow_up
            value = apply[f.group(1)](value, float(f.group(2)))
            assert value.is_integer(), row  # every intermediate result is whole
        assert float(row["ground_truth"]) == value
        assert row["user_prompt"] not in demos
    assert not {_key(r) for r in train} & {_key(r) for r in heldout}


def _key(row: dict[str, Any]) -> tuple[str, ...]:
    return (row["user_prompt"], *row["follow_ups"])
