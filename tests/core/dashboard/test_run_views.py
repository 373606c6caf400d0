"""What the run page and the trace viewer get from the API: tool calls as blocks with their
results and masked tokens, content parts as text, tool-use and warm-start metrics, the seeds'
overview (Improvement, Samples), checkpoints with deployment / Hub status, held-out rows."""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

from osmosis_ai.dashboard import create_app
from osmosis_ai.dashboard._traces import content_text, sample_view
from osmosis_ai.runs import RunDir, create_run_dir
from osmosis_ai.runs._published import record_deployment, record_upload

# A Strands calculator rollout as the gateway records it: the user turn as content parts,
# one tool call, its result, the answer. Tokens: prompt | call (trained) | result | answer.
TOKENS = [
    "<user>What is 18 / 3?",
    "<asst>",
    '{"name": "divide", "arguments": {"a": 18, "b": 3}}',
    "<tool>",
    "6",
    "</tool>",
    "<asst>",
    "18 / 3 = 6",
]
MASK = [0, 0, 1, 0, 0, 0, 0, 1]
SAMPLE: dict[str, Any] = {
    "step": 1,
    "group_id": 0,
    "rollout_id": "r0",
    "sample_id": "main",
    "reward": 1.0,
    "advantage": 0.5,
    "truncated": False,
    "messages": [
        {"role": "user", "content": [{"text": "What is 18 / 3?", "type": "text"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "divide", "arguments": '{"a": 18, "b": 3}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": [{"text": "6"}]},
        {"role": "assistant", "content": "18 / 3 = 6"},
    ],
    "sequences": [
        {
            "token_ids": list(range(len(TOKENS))),
            "tokens": TOKENS,
            "mask": MASK,
            "sampler_logprobs": [None] * len(TOKENS),
            "trainer_logprobs": None,
        }
    ],
}


def test_content_parts_render_as_text() -> None:
    assert content_text([{"text": "What is 18 / 3?", "type": "text"}]) == "What is 18 / 3?"
    assert (
        content_text(
            [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "x"}}]
        )
        == "a\n[image_url]"
    )
    assert content_text({"text": "one part"}) == "one part"
    assert content_text(None) == "" and content_text("plain") == "plain"


def test_a_tool_call_is_one_block_with_arguments_result_and_masked_tokens() -> None:
    view = sample_view(SAMPLE)
    kinds = [b["kind"] for b in view["blocks"]]
    assert kinds == ["message", "tool_call", "message"]
    user, call, answer = view["blocks"]
    assert (user["role"], user["text"]) == ("user", "What is 18 / 3?")
    assert (call["name"], call["arguments"]) == ("divide", {"a": 18, "b": 3})
    assert call["result"]["text"] == "6"
    assert call["result"]["tokens"] == {
        "sequence": 0,
        "start": 4,
        "end": 5,
        "masked": 1,
        "trained": 0,
    }
    assert answer["text"] == "18 / 3 = 6"
    assert view["sequences"][0]["tool_spans"] == [{"start": 4, "end": 5, "call_id": "call_1"}]


def test_a_result_that_was_trained_on_and_one_without_its_call_show_as_such() -> None:
    sample = json.loads(json.dumps(SAMPLE))
    sample["sequences"][0]["mask"] = [0, 0, 1, 0, 1, 0, 0, 1]  # the result's token trained
    sample["messages"].insert(3, {"role": "tool", "tool_call_id": "lost", "content": "x?"})
    sample["messages"][2]["content"] = "not in the tokens"
    view = sample_view(sample)
    call = view["blocks"][1]
    assert call["result"]["tokens"] is None  # not located: said so, not guessed
    assert view["blocks"][2] == {
        "kind": "tool_result",
        "call_id": "lost",
        "text": "x?",
        "tokens": None,
    }
    sample["messages"][2]["content"] = "6"
    assert sample_view(sample)["blocks"][1]["result"]["tokens"]["trained"] == 1


def _run(root: Path) -> RunDir:
    run = create_run_dir(root, "calc", now=datetime(2026, 1, 1, 9, 0, 0), model="tiny")
    run.update_status(status="finished", step=6, total_steps=6, created_at=1.0, finished_at=61.0)
    return run


@pytest.fixture
def client_run(tmp_path: Path) -> tuple[TestClient, RunDir]:
    root = tmp_path / "runs"
    run = _run(root)
    records = [
        {
            "step": s,
            "kind": "warm_start",
            "warm_start/loss": 2.0 / s,
            "warm_start/token_accuracy": 0.3 * s,
        }
        for s in (1, 2, 3)
    ]
    records += [
        {
            "step": s,
            "kind": "train",
            "reward_mean": 0.1 * s,
            "samples": 8.0,
            "tools/call_rate": 0.5,
            "tools/calls_per_rollout": 1.5,
            "tools/turns_per_rollout": 2.5,
        }
        for s in range(1, 7)
    ]
    (run.path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    folder = run.path / "traces"
    folder.mkdir()
    (folder / "step_000001.jsonl").write_text(json.dumps(SAMPLE) + "\n")
    for name in ("warm", "step_000006"):
        ckpt = run.checkpoints / name
        (ckpt / "adapter").mkdir(parents=True)
        (ckpt / "trainer_state.pt").write_bytes(b"x")
        (ckpt / "checkpoint.json").write_text(json.dumps({"step": 0 if name == "warm" else 6}))
    step6 = run.checkpoints / "step_000006"
    record_deployment(
        step6, url="http://127.0.0.1:8000/v1", name="calc-step6", engine="hf", pid=os.getpid()
    )
    record_upload(
        step6, repo="me/calc", url="https://huggingface.co/me/calc", private=True, merged=False
    )
    (run.path / "heldout.json").write_text(
        json.dumps(
            {
                "candidate": "calc:6",
                "baseline": "tiny",
                "rows": 24,
                "candidate_mean": 0.6,
                "baseline_mean": 0.1,
                "diff": 0.5,
                "ci_low": 0.3,
                "ci_high": 0.7,
                "models": [
                    {
                        "role": r,
                        "model": m,
                        "samples": 24,
                        "pass_rate": p,
                        "reward_mean": p,
                        "tool_call_rate": t,
                        "tool_calls_per_rollout": t * 2,
                        "turns_per_rollout": 1 + t * 2,
                    }
                    for r, m, p, t in (
                        ("base", "tiny", 0.1, 0.0),
                        ("warm", "calc:warm", 0.3, 1.0),
                        ("trained", "calc:6", 0.6, 1.0),
                    )
                ],
                "pass_vs_base": {"diff": 0.5, "ci_low": 0.3, "ci_high": 0.7, "rows": 24},
            }
        )
    )
    return TestClient(create_app(root, tmp_path / "evals"), base_url="http://127.0.0.1"), run


def test_metrics_carry_tool_use_and_the_warm_start(client_run: tuple[TestClient, RunDir]) -> None:
    client, run = client_run
    body = client.get(f"/api/runs/{run.run_id}/metrics").json()
    assert [r["warm_start/loss"] for r in body["warm_start"]] == [2.0, 1.0, pytest.approx(2 / 3)]
    assert [r["step"] for r in body["train"]] == [1, 2, 3, 4, 5, 6]
    assert body["train"][0]["tools/call_rate"] == 0.5
    assert body["train"][0]["tools/turns_per_rollout"] == 2.5


def test_overview_checkpoints_and_heldout(client_run: tuple[TestClient, RunDir]) -> None:
    client, run = client_run
    d = client.get(f"/api/runs/{run.run_id}").json()
    assert d["samples"] == 48 and d["duration_s"] == 60.0
    assert d["improvement"]["change"] == pytest.approx(0.3)  # mean of 4-6 minus mean of 1-3
    assert d["warm_start"]["steps"] == 3
    by_name = {c["name"]: c for c in d["checkpoints"]}
    assert set(by_name) == {"warm", "6"}
    assert by_name["6"]["deployment"]["state"] == "serving"
    assert by_name["6"]["hub"] == {
        "state": "uploaded",
        "repo": "me/calc",
        "url": "https://huggingface.co/me/calc",
        "private": True,
        "at": by_name["6"]["hub"]["at"],
        "error": None,
    }
    assert by_name["warm"]["deployment"] is None and by_name["warm"]["hub"] is None
    assert [m["role"] for m in d["heldout"]["models"]] == ["base", "warm", "trained"]


def test_trace_route_returns_blocks(client_run: tuple[TestClient, RunDir]) -> None:
    client, run = client_run
    sample = client.get(f"/api/runs/{run.run_id}/traces/1").json()["groups"][0]["samples"][0]
    assert [b["kind"] for b in sample["blocks"]] == ["message", "tool_call", "message"]
    assert sample["blocks"][0]["text"] == "What is 18 / 3?"
    assert sample["blocks"][1]["result"]["tokens"]["masked"] == 1
