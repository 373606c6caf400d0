"""Make the {{name}} rollout's data from its own tools: demonstrations, training and held-out rows.

    python rollouts/{{name}}/make_data.py          # rewrites data/{{name}}_demos.jsonl,
                                                   # data/{{name}}.jsonl, data/{{name}}_heldout*.jsonl

Deterministic (a fixed seed), no model involved: every answer is computed by the tools in
``main.py``, so the files are right by construction.

- ``{{name}}_demos.jsonl``: the warm start's demonstrations ([warm_start] in the training
  config). One-operation questions with 2-4 digit numbers, each one conversation as the agent
  has it: the system prompt, the question, one tool call, the tool's result, the final number.
  The ``tools`` are the specs Strands sends the model, so the warm start renders the same
  prompt as RL.
- ``{{name}}.jsonl`` (RL): calculations asked over several turns, each next operation about
  the previous result ("What is 347 * 29?", then "Subtract 1500 from that."). The agent has to
  carry each result into its next call, a kind of conversation the demonstrations never show,
  and RL is what teaches it to. What should not matter varies: the wording of a follow-up
  (five per operation), the order of the operations, one to three follow-ups. The ``steps``
  column (the value after each operation) is what the grader's partial credit checks.
  (A 135M model asked the whole chain at once, "What is 347 * 29 - 1500?", answered after its
  first call or reused a number of the question: no exact answer in 9 x 32 RL rollouts.)
- Held-out files, each holding out one thing training never showed (``[heldout.datasets]``
  reports each on its own): ``{{name}}_heldout.jsonl``, new rows drawn as the training rows
  are; ``_heldout_phrasings``, follow-ups worded in ways no training row uses ("Take away
  56.", "Multiply it by 5."); ``_heldout_orders``, operations following one another in an
  order no training row has; ``_heldout_longer``, four follow-ups, one more than any training
  row. To check your own wording, write a file like them and add it to ``[heldout.datasets]``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import random
import re
import sys
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


FOLLOW_UPS = {
    "add": ["What is the result + {}?", "Add {} to that.", "Now add {}.", "Plus {}?",
            "Add {} to it."],
    "subtract": ["What is the result - {}?", "Subtract {} from that.", "Now subtract {}.",
                 "Minus {}?", "Subtract {} from it."],
    "multiply": ["What is the result * {}?", "Multiply that by {}.", "Now multiply by {}.",
                 "Times {}?", "Multiply the result by {}."],
    "divide": ["What is the result / {}?", "Divide that by {}.", "Now divide by {}.",
               "Divided by {}?", "Divide the result by {}."],
}
"""How the training rows ask for a next operation on the previous result, several ways each:
the agent has to carry that result (its tool said "The result is 2712.") into its next call,
whatever the wording. ``main.py``'s grader reads the row's ``steps`` column, not the wording."""

NEW_FOLLOW_UPS = {
    "add": ["Increase it by {}.", "What do you get if you add {}?", "Add another {}, please."],
    "subtract": ["Take away {}.", "Decrease it by {}.", "What do you get if you subtract {}?"],
    "multiply": ["Multiply it by {}.", "What do you get if you multiply by {}?",
                 "Now {} times that."],
    "divide": ["Divide it by {}.", "What do you get if you divide by {}?",
               "Split that into {} equal parts."],
}
"""Wordings no training row uses, for the held-out file of new phrasings."""

NEW_ORDERS = {("subtract", "multiply"), ("multiply", "divide"), ("divide", "add")}
"""Operations that never follow one another in a training row (the held-out file of new orders
has each of its rows hold at least one of these pairs)."""

FOLLOW_UPS_TRAINED = (1, 2, 3)
"""Follow-ups per training row; the held-out file of longer chains has one more."""

OPS = ("add", "subtract", "multiply", "divide")
_LARGEST = 10**7
"""Rows whose numbers grow past this are drawn again (the answers stay readable)."""


def _operand(rng: random.Random, op: str, value: float) -> int | None:
    """The number a follow-up applies to ``value`` (``None``: no whole division exists)."""
    if op in ("add", "subtract"):
        return rng.randint(10, 999)
    if op == "multiply":
        return rng.randint(2, 9)
    divisors = [d for d in range(2, 10) if value and float(value / d).is_integer()]
    return rng.choice(divisors) if divisors else None


def _order(rng: random.Random, length: int, new_order: bool) -> list[str]:
    """Operations for a row of ``length``: no pair of ``NEW_ORDERS`` (training), or at least
    one (``new_order``)."""
    while True:
        ops = [rng.choice(OPS) for _ in range(length)]
        pairs = set(zip(ops, ops[1:], strict=False))
        if bool(pairs & NEW_ORDERS) == new_order:
            return ops


def _chain(
    rng: random.Random, follow_ups: int, phrases: dict[str, list[str]], new_order: bool = False
) -> tuple[str, list[str], list[float]] | None:
    """One row: the first question, the follow-ups and the value after each operation; ``None``
    when the drawn numbers do not work out (a division with no whole result, huge numbers)."""
    ops = _order(rng, follow_ups + 1, new_order)
    text, (name, a, b) = _one_operation(rng, ops[0])
    value = _apply(name, a, b)
    steps, asked = [value], []
    for op in ops[1:]:
        operand = _operand(rng, op, value)
        if operand is None:
            return None
        value = _apply(op, value, operand)
        if abs(value) > _LARGEST:
            return None
        steps.append(value)
        asked.append(rng.choice(phrases[op]).format(operand))
    return f"What is {text}?", asked, steps


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


HELD_OUT = {
    "heldout": (HELDOUT_ROWS, FOLLOW_UPS_TRAINED, "trained", False),
    "phrasings": (24, FOLLOW_UPS_TRAINED, "new", False),
    "orders": (16, FOLLOW_UPS_TRAINED, "trained", True),
    "longer": (16, (max(FOLLOW_UPS_TRAINED) + 1,), "trained", False),
}
"""The held-out files: rows, follow-ups per row, wordings, new orders. ``heldout`` is drawn
as the training rows are; each other file changes one thing training never showed."""


def _rows(
    rng: random.Random, count: int, follow_ups: tuple[int, ...], phrases: dict[str, list[str]],
    new_order: bool, seen: set[str],
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    while len(rows) < count:
        chain = _chain(rng, rng.choice(follow_ups), phrases, new_order)
        if chain is None:
            continue
        question, asked, steps = chain
        key = " ".join([question, *asked])
        if key in seen or not all(float(v).is_integer() for v in steps):
            continue
        seen.add(key)
        rows.append({
            "user_prompt": question, "follow_ups": asked,
            "steps": [int(v) for v in steps], "ground_truth": _number(steps[-1]),
        })
    return rows


def generate(seed: int = SEED) -> dict[str, list[dict[str, Any]]]:
    """Every file's rows: ``demos``, ``train`` and each of ``HELD_OUT`` (disjoint questions)."""
    main = _main_module()
    rng = random.Random(seed)
    demos = []
    for i in range(DEMOS):
        text, step = _one_operation(rng, OPS[i % len(OPS)])
        demos.append(_demonstration(main, _demo_question(text, step, i), step, i))
    seen: set[str] = set()
    out = {"demos": demos, "train": _rows(rng, TRAIN_ROWS, FOLLOW_UPS_TRAINED, FOLLOW_UPS, False, seen)}
    for name, (count, follow_ups, wording, new_order) in HELD_OUT.items():
        phrases = NEW_FOLLOW_UPS if wording == "new" else FOLLOW_UPS
        out[name] = _rows(rng, count, follow_ups, phrases, new_order, seen)
    return out


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
    suffixes = {"demos": "_demos", "train": "", "heldout": "_heldout"}
    for key in rows:
        suffix = suffixes.get(key, f"_heldout_{key}")
        path = args.out / f"{args.name}{suffix}.jsonl"
        write_jsonl(path, rows[key])
        print(f"{path}: {len(rows[key])} rows")


if __name__ == "__main__":
    main()
