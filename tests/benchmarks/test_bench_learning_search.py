"""The search benchmark's reading counts, on hand-written conversations."""

from __future__ import annotations

import json
from typing import Any

from tests.benchmarks.bench_learning_search import reading


def _conversation(*reads: str) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "What is the price of X?"}]
    search = {"name": "search", "arguments": json.dumps({"query": "X"})}
    messages += [
        {"role": "assistant", "tool_calls": [{"id": "s", "type": "function", "function": search}]},
        {"role": "tool", "tool_call_id": "s", "content": "D200: X Pro (Pro.)\nD100: X (Std.)"},
    ]
    for i, doc_id in enumerate(reads):
        read = {"name": "read", "arguments": json.dumps({"doc_id": doc_id})}
        call = {"id": f"r{i}", "type": "function", "function": read}
        messages += [
            {"role": "assistant", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"r{i}", "content": "..."},
        ]
    messages.append({"role": "assistant", "content": "$5"})
    return messages


def test_reading_counts_reads_right_documents_and_first_result_habit() -> None:
    samples = [
        (_conversation("D200"), "D100"),  # the first result, the wrong one
        (_conversation("D200", "d100"), "D100"),  # then the right one
        (_conversation("D100"), "D100"),  # the right one at once
        (_conversation(), "D100"),  # no read
    ]
    assert reading(samples) == {
        "rollouts": 4.0,
        "reads_per_rollout": 1.0,
        "right_doc_rate": 0.5,
        "first_result_rate": 0.5,
    }
    assert reading([]) == {}
