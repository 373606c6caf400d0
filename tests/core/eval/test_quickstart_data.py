"""The strands template's data: made by its own script from its own tools, and shipped as made.

Demonstrations are one-operation conversations shaped as Strands sends them (system prompt,
question, one tool call, the tool's result, the final number); the RL and held-out rows are
multi-step questions the demonstrations never show.
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
_MULTI = re.compile(r"^What is \d+(?: [-+*/] \d+){2,3}\?$")


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
        m = _ONE_OP.match(question)
        assert m is not None, question
        a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
        (tool_call,) = call["tool_calls"]
        assert tool_call["function"]["name"] == ops[op]
        assert json.loads(tool_call["function"]["arguments"]) == {"a": a, "b": b}
        value = {"+": a + b, "-": a - b, "*": a * b, "/": a / b}[op]
        assert result["role"] == "tool" and result["tool_call_id"] == tool_call["id"]
        assert float(result["content"]) == value and answer["content"] == result["content"]
        names = [t["function"]["name"] for t in demo.tools or []]
        assert names == ["add", "subtract", "multiply", "divide"]


def test_rl_and_heldout_rows_are_multi_step_and_disjoint(ws: Path) -> None:
    demos = {json.dumps(d["messages"][1]["content"]) for d in _jsonl(ws / "data/calc_demos.jsonl")}
    train = _jsonl(ws / "data/calc.jsonl")
    heldout = _jsonl(ws / "data/calc_heldout.jsonl")
    assert len(heldout) >= 24
    for row in train + heldout:
        assert _MULTI.match(row["user_prompt"]), row
        # Left to right is right: multiplications and divisions come first in every question.
        expression = row["user_prompt"].removeprefix("What is ").removesuffix("?")
        assert float(row["ground_truth"]) == eval(expression)  # noqa: S307 (our own digits)
        assert row["user_prompt"] not in demos
    assert not {r["user_prompt"] for r in train} & {r["user_prompt"] for r in heldout}
