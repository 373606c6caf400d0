"""The strands template's data: made by its own script from its own tools, and shipped as made.

Demonstrations are one-operation conversations shaped as Strands sends them (system prompt,
question, one tool call, the tool's result, the final number); the RL and held-out rows are
calculations of two to five operations over as many turns ("What is 113 * 24?", then "Subtract
523 from that."), which the demonstrations never show. Each held-out file holds out one thing
the training rows never show: a wording, an order of operations, a longer chain.
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
HELD_OUT = ("heldout", "heldout_phrasings", "heldout_orders", "heldout_longer")
_OPS = {"+": "add", "-": "subtract", "*": "multiply", "/": "divide"}


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
    for name in HELD_OUT:
        assert _jsonl(ws / f"data/calc_{name}.jsonl") == made[name.removeprefix("heldout_")]


def test_the_script_writes_the_workspace_files(ws: Path, tmp_path: Path) -> None:
    import subprocess
    import sys

    out = tmp_path / "data"
    subprocess.run(
        [sys.executable, str(ws / "rollouts/calc/make_data.py"), "--out", str(out)],
        check=True, capture_output=True,
    )
    for name in ("calc_demos.jsonl", "calc.jsonl", *(f"calc_{h}.jsonl" for h in HELD_OUT)):
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


def _module(ws: Path) -> Any:
    spec = importlib.util.spec_from_file_location("make_data_q", ws / "rollouts/calc/make_data.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _parse(follow_up: str, phrases: dict[str, list[str]]) -> tuple[str, int] | None:
    """(operation, number) of a follow-up worded as one of ``phrases``, else None."""
    for op, wordings in phrases.items():
        for wording in wordings:
            m = re.fullmatch(re.escape(wording).replace(r"\{\}", r"(\d+)"), follow_up)
            if m is not None:
                return op, int(m.group(1))
    return None


def _ops(row: dict[str, Any], phrases: dict[str, list[str]]) -> list[tuple[str, int]]:
    m = _ONE_OP.match(row["user_prompt"])
    assert m is not None, row
    ops = [(_OPS[m.group(2)], int(m.group(3)))]
    for follow_up in row["follow_ups"]:
        parsed = _parse(follow_up, phrases)
        assert parsed is not None, follow_up
        ops.append(parsed)
    return ops


def test_rows_are_right_and_their_steps_are_each_operations_value(ws: Path) -> None:
    md = _module(ws)
    apply = {"add": float.__add__, "subtract": float.__sub__, "multiply": float.__mul__,
             "divide": float.__truediv__}
    demos = {json.dumps(d["messages"][1]["content"]) for d in _jsonl(ws / "data/calc_demos.jsonl")}
    for name in ("calc", *(f"calc_{h}" for h in HELD_OUT)):
        phrases = md.NEW_FOLLOW_UPS if name.endswith("phrasings") else md.FOLLOW_UPS
        for row in _jsonl(ws / f"data/{name}.jsonl"):
            m = _ONE_OP.match(row["user_prompt"])
            assert m is not None and row["user_prompt"] not in demos, row
            value, steps = float(m.group(1)), []
            for op, b in _ops(row, phrases):
                value = apply[op](value, float(b))
                assert value.is_integer(), row  # every intermediate result is whole
                steps.append(value)
            assert row["steps"] == steps and float(row["ground_truth"]) == value, row


def test_each_heldout_file_holds_out_what_training_never_shows(ws: Path) -> None:
    md = _module(ws)
    rows = {name: _jsonl(ws / f"data/calc_{name}.jsonl") for name in HELD_OUT}
    train = _jsonl(ws / "data/calc.jsonl")
    assert len(train) == 64 and len(rows["heldout"]) >= 24 and len(rows["heldout_phrasings"]) >= 24
    keys = [{_key(r) for r in part} for part in (train, *rows.values())]
    assert sum(map(len, keys)) == len(set().union(*keys))  # no question in two files

    def pairs(row: dict[str, Any], phrases: dict[str, list[str]]) -> set[tuple[str, str]]:
        ops = [op for op, _ in _ops(row, phrases)]
        return set(zip(ops, ops[1:], strict=False))

    # Training varies what should not matter: every wording, one to three follow-ups.
    used = {f for r in train for f in r["follow_ups"]}
    for op, wordings in md.FOLLOW_UPS.items():
        for wording in wordings:
            pattern = re.escape(wording).replace(r"\{\}", r"\d+")
            assert any(re.fullmatch(pattern, f) for f in used), (op, wording)
    assert {len(r["follow_ups"]) for r in train} == {1, 2, 3}
    seen_pairs = set().union(*(pairs(r, md.FOLLOW_UPS) for r in train))
    assert not seen_pairs & md.NEW_ORDERS
    # New wordings: none of them in training, each row worded only the new ways.
    assert all(_parse(f, md.FOLLOW_UPS) is None for r in rows["heldout_phrasings"]
               for f in r["follow_ups"])
    # New orders: each row has a pair of operations no training row has.
    assert all(pairs(r, md.FOLLOW_UPS) - seen_pairs for r in rows["heldout_orders"])
    # Longer: one follow-up more than any training row.
    assert {len(r["follow_ups"]) for r in rows["heldout_longer"]} == {4}


def _key(row: dict[str, Any]) -> tuple[str, ...]:
    return (row["user_prompt"], *row["follow_ups"])
