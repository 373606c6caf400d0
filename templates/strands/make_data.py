"""Make the {{name}} rollout's data from its own tools: demonstrations, training and held-out rows.

    python rollouts/{{name}}/make_data.py          # rewrites data/{{name}}_demos.jsonl,
                                                   # data/{{name}}.jsonl, data/{{name}}_heldout.jsonl

Deterministic (a fixed seed), no model involved: every answer is computed by the tools in
``main.py``, so the files are right by construction.

- ``{{name}}_demos.jsonl``: the warm start's demonstrations ([warm_start] in the training
  config). One-operation questions with 2-4 digit numbers, each one conversation as the agent
  has it: the system prompt, the question, one tool call, the tool's result, the final number.
  The ``tools`` are the specs Strands sends the model, so the warm start renders the same
  prompt as RL.
- ``{{name}}.jsonl`` (RL) and ``{{name}}_heldout.jsonl`` (held-out): calculations of two or three
  operations asked over several turns, each next operation about the previous result ("What is
  347 * 29?", then "What is the result - 1500?"). The agent has to carry each result into its next
  call, a kind of conversation the demonstrations never show, and RL is what teaches it to.
  (A 135M model asked the whole chain at once, "What is 347 * 29 - 1500?", answered after its
  first call or reused a number of the question: no exact answer in 9 x 32 RL rollouts.)
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import random
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SEED = 26
DEMOS = 64
TRAIN_ROWS = 64
HELDOUT_ROWS = 24

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")

Step = tuple[str, float, float]
"""One tool call: (tool name, a, b)."""


def _main_module() -> Any:
    """The rollout's ``main.py`` (its tools and system prompt), imported by path."""
    spec = importlib.util.spec_from_file_location("_rollout_main", HERE / "main.py")
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot import {HERE / 'main.py'}")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("_rollout_main", module)
    spec.loader.exec_module(module)
    return module


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(x)


# One operation, 2-4 digit numbers, whole results (division is exact).
def _one_operation(rng: random.Random, op: str) -> tuple[str, Step]:
    if op == "add":
        a, b = rng.randint(10, 9999), rng.randint(10, 9999)
        return f"{a} + {b}", ("add", a, b)
    if op == "subtract":
        a, b = sorted((rng.randint(10, 9999), rng.randint(10, 9999)), reverse=True)
        return f"{a} - {b}", ("subtract", a, b)
    if op == "multiply":
        a, b = rng.randint(10, 999), rng.randint(10, 99)
        return f"{a} * {b}", ("multiply", a, b)
    b, q = rng.randint(10, 99), rng.randint(10, 99)
    return f"{b * q} / {b}", ("divide", b * q, b)


def _apply(name: str, a: float, b: float) -> float:
    return {"add": a + b, "subtract": a - b, "multiply": a * b, "divide": a / b}[name]


FOLLOW_UP = {"add": "What is the result + {}?", "subtract": "What is the result - {}?",
             "multiply": "What is the result * {}?", "divide": "What is the result / {}?"}
"""How a next operation on the previous result is asked; the agent has to carry that result
(its tool said "The result is 2712.") into its next call. ``main.py`` reads the same phrases."""


def _chain(rng: random.Random) -> tuple[str, list[str], float]:
    """A calculation of two or three operations: the first question, the follow-ups, the answer.

    Multiplications and divisions come first so the numbers stay readable; every intermediate
    result is whole."""
    shapes: list[Callable[[], tuple[str, Step, list[tuple[str, int]]]]] = [
        lambda: (*_one_operation(rng, "multiply"), [("subtract", rng.randint(100, 2000))]),
        lambda: (*_one_operation(rng, "multiply"), [("add", rng.randint(100, 9999))]),
        lambda: (*_one_operation(rng, "add"), [("subtract", rng.randint(10, 999))]),
        lambda: (*_one_operation(rng, "subtract"), [("add", rng.randint(10, 999))]),
        lambda: (*_one_operation(rng, "divide"), [(rng.choice(["add", "subtract"]), rng.randint(100, 999))]),
        lambda: (
            *_one_operation(rng, "multiply"),
            [("add", rng.randint(100, 999)), ("subtract", rng.randint(10, 99))],
        ),
        lambda: (
            *_one_operation(rng, "add"),
            [("subtract", rng.randint(10, 999)), ("multiply", rng.randint(2, 9))],
        ),
    ]
    text, (name, a, b), rest = rng.choice(shapes)()
    value = _apply(name, a, b)
    for op, operand in rest:
        value = _apply(op, value, operand)
    return f"What is {text}?", [FOLLOW_UP[op].format(x) for op, x in rest], value


async def _tool_result(tool: Any, call_id: str, a: float, b: float) -> str:
    """What Strands puts in the tool message: the tool run through Strands itself."""
    use = {"toolUseId": call_id, "name": tool.tool_name, "input": {"a": a, "b": b}}
    result: dict[str, Any] = {}
    async for event in tool.stream(use, {}):
        if isinstance(event, dict) and event.get("type") == "tool_result":
            result = event["tool_result"]
    return "".join(part.get("text", "") for part in result.get("content", []))


def _demonstration(main: Any, question: str, step: Step, index: int) -> dict[str, Any]:
    """One conversation, shaped as Strands sends it to the policy (``format_request``)."""
    from strands.models.openai import OpenAIModel

    tools = {t.tool_name: t for t in main.TOOLS}
    name, a, b = step
    call_id = f"call_{index:04d}"
    output = asyncio.run(_tool_result(tools[name], call_id, a, b))
    strands_messages: list[Any] = [
        {"role": "user", "content": [{"text": question}]},
        {
            "role": "assistant",
            "content": [{"toolUse": {"toolUseId": call_id, "name": name, "input": {"a": a, "b": b}}}],
        },
        {
            "role": "user",
            "content": [
                {"toolResult": {"toolUseId": call_id, "status": "success",
                                "content": [{"text": output}]}}
            ],
        },
    ]
    model = OpenAIModel(client_args={}, model_id="policy")
    request = model.format_request(
        strands_messages, [t.tool_spec for t in main.TOOLS], main.SYSTEM_PROMPT
    )
    messages = list(request["messages"])
    # The final answer is the number alone, as the system prompt asks.
    messages.append({"role": "assistant", "content": _NUMBER.findall(output)[-1]})
    return {"messages": messages, "tools": request["tools"], "source": f"make_data:{index}"}


def _demo_question(text: str, step: Step, index: int) -> str:
    """A third of the demonstrations ask "What is 347 * 29?"; the others give the first number
    as "the result", before or after the question ("The result is 347. What is the result *
    29?", "What is the result * 29? The result is 347."), so the call takes "the result" from
    the phrase that names it, not from a position in the question. Each is still one operation
    in one turn: carrying a tool's result into the next turn's call is left to RL."""
    name, a, b = step
    kind = (index // 4) % 3
    if kind == 0:
        return f"What is {text}?"
    given, asked = f"The result is {_number(a)}.", f"What is the result {_SYMBOLS[name]} {_number(b)}?"
    return f"{given} {asked}" if kind == 1 else f"{asked} {given}"


_SYMBOLS = {"add": "+", "subtract": "-", "multiply": "*", "divide": "/"}


def generate(seed: int = SEED) -> dict[str, list[dict[str, Any]]]:
    """The three files' rows: ``demos``, ``train`` and ``heldout`` (disjoint questions)."""
    main = _main_module()
    rng = random.Random(seed)
    ops = ["add", "subtract", "multiply", "divide"]
    demos = []
    for i in range(DEMOS):
        text, step = _one_operation(rng, ops[i % len(ops)])
        demos.append(_demonstration(main, _demo_question(text, step, i), step, i))
    seen: set[str] = set()
    chains: list[dict[str, Any]] = []
    while len(chains) < TRAIN_ROWS + HELDOUT_ROWS:
        question, follow_ups, answer = _chain(rng)
        key = " ".join([question, *follow_ups])
        if key in seen or not float(answer).is_integer():
            continue
        seen.add(key)
        chains.append(
            {"user_prompt": question, "follow_ups": follow_ups, "ground_truth": _number(answer)}
        )
    return {"demos": demos, "train": chains[:TRAIN_ROWS], "heldout": chains[TRAIN_ROWS:]}


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=HERE.parent.parent / "data",
        help="folder for the three files (default: the workspace's data/)",
    )
    parser.add_argument("--name", default="{{name}}", help="file name prefix")
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args(argv)
    rows = generate(args.seed)
    for key, suffix in (("demos", "_demos"), ("train", ""), ("heldout", "_heldout")):
        path = args.out / f"{args.name}{suffix}.jsonl"
        write_jsonl(path, rows[key])
        print(f"{path}: {len(rows[key])} rows")


if __name__ == "__main__":
    main()
