"""Demonstrations rendered for the warm start: what is trained (assistant turns and their
end-of-turn token) and what is not (system, user, tool results, template glue); conversations
over the cap are skipped and counted."""

from __future__ import annotations

import json
from typing import Any

import pytest

from osmosis_ai.data import Demonstration
from osmosis_trainer.warm_start import WarmStartRenderer, eos_token_ids


@pytest.fixture(scope="module")
def renderer(tiny_loaded: Any) -> WarmStartRenderer:
    return WarmStartRenderer(
        tiny_loaded.tokenizer, eos_token_ids(tiny_loaded.model, tiny_loaded.tokenizer)
    )


def demo(line: int = 1, *, answer: str = "5") -> Demonstration:
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'},
    }
    return Demonstration(
        line=line,
        messages=[
            {"role": "system", "content": "SYSTEM-TEXT"},
            {"role": "user", "content": [{"type": "text", "text": "USER-TEXT"}]},
            {"role": "assistant", "content": "Let me add.", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "TOOL-RESULT"},
            {"role": "assistant", "content": answer},
        ],
        tools=[{"type": "function", "function": {"name": "add", "parameters": {}}}],
    )


def _spans(tok: Any, ids: list[int], mask: list[int]) -> tuple[list[str], list[str]]:
    """(trained runs, untrained runs) as text."""
    runs: list[tuple[int, list[int]]] = []
    for t, m in zip(ids, mask, strict=True):
        if runs and runs[-1][0] == m:
            runs[-1][1].append(t)
        else:
            runs.append((m, [t]))
    trained = [tok.decode(r) for m, r in runs if m]
    other = [tok.decode(r) for m, r in runs if not m]
    return trained, other


def test_only_assistant_turns_train(renderer: WarmStartRenderer) -> None:
    tok = renderer.tokenizer
    (seq,) = renderer.render(demo()).sequences
    trained, other = _spans(tok, seq.token_ids, seq.loss_mask)
    end = tok.eos_token
    assert trained == [
        f'Let me add.<tool_call>\n{{"name": "add", "arguments": {{"a": 2, "b": 3}}}}\n'
        f"</tool_call>{end}",
        f"5{end}",
    ]
    untrained = "".join(other)
    for text in ("SYSTEM-TEXT", "USER-TEXT", "TOOL-RESULT", '"name": "add"'):  # tools block too
        assert text in untrained
    # the ids are one tokenisation of the full conversation as the template renders it
    assert tok.decode(seq.token_ids) == "".join([other[0], trained[0], other[1], trained[1]])
    assert seq.prompt_length == seq.loss_mask.index(1)


def test_the_engines_parser_reads_the_trained_turn_back(renderer: WarmStartRenderer) -> None:
    from osmosis_trainer.engines._response import ResponseParser

    tok = renderer.tokenizer
    d = demo()
    ids = renderer.completion_ids(d.messages[:2], d.messages[2], d.tools)
    assert ids[-1] in renderer.eos_ids
    message, calls = ResponseParser(tok)(tok.decode(ids[:-1]), [])
    assert message["content"] == "Let me add."
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("add", {"a": 2, "b": 3})]


def test_over_the_cap_is_skipped_and_counted(renderer: WarmStartRenderer) -> None:
    long = demo(2, answer="many words " * 200)
    cap = renderer.render(demo(1)).tokens + 10
    report = renderer.render_all([demo(1), long, demo(4)], max_tokens=cap, where="d.jsonl")
    assert [d.line for d in report.demos] == [1, 4]
    assert dict(report.skipped) == {"over_max_tokens": 1}
    assert (
        report.examples[0].startswith("d.jsonl:2: ") and f"max_tokens = {cap}" in report.examples[0]
    )
    assert report.demos[0].trained_tokens > 0 and report.demos[0].tokens > 0
