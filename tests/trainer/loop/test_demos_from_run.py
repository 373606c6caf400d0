"""``osmosis dataset from-run RUN[:STEP]``: the trajectories a training run recorded (written by
the trainer's own TraceSampler) become warm-start rows with the tools specs the agent sent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from osmosis_ai.errors import OsmosisError
from osmosis_ai.eval import demos_from_run
from osmosis_ai.rollout import LLMCall
from osmosis_ai.runs import create_run_dir
from osmosis_trainer.loop._rollouts import GradedSample, SequenceData, TrainBatch
from osmosis_trainer.loop._traces import TraceSampler

TOOLS = [
    {
        "type": "function",
        "function": {"name": "add", "description": "Add.", "parameters": {"type": "object"}},
    }
]


def _call(i: int) -> LLMCall:
    """A two-turn conversation: a tool call, its result, then the answer ``i + 1``."""
    request: list[dict[str, Any]] = [
        {"role": "system", "content": "calc"},
        {"role": "user", "content": f"What is {i} + 1?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"c{i}",
                    "type": "function",
                    "function": {"name": "add", "arguments": f'{{"a": {i}, "b": 1}}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": f"c{i}", "content": str(i + 1)},
    ]
    return LLMCall(
        call_id=f"x{i}",
        rollout_id=f"r{i}",
        sample_id="main",
        request_messages=request,
        tools=TOOLS,
        finish_reason="stop",
        response_message={"role": "assistant", "content": str(i + 1)},
    )


def _sample(i: int, reward: float) -> GradedSample:
    seq = SequenceData(token_ids=[1, 2, 3], loss_mask=[0, 1, 1], sampler_logprobs=[0.0, -1, -1])
    return GradedSample(
        group_id=i // 2,
        rollout_id=f"r{i}",
        sample_id="main",
        reward=reward,
        sequences=[seq],
        last_call=_call(i),
    )


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """A run whose steps 1 and 2 recorded 4 trajectories each (rewards 1, 0, 1, 1)."""
    config = tmp_path / "calc.toml"
    config.write_text("[evaluation]\npass_threshold = 0.5\n")
    run = create_run_dir(tmp_path / "runs", "calc", config_file=config)
    sampler = TraceSampler(run.path, 4)
    batch = TrainBatch([], 0, 0, 0)
    for step in (1, 2):
        # Step 2 repeats step 1's first two conversations: duplicates.
        picked = [
            _sample(i, r)
            for i, r in zip(
                (0, 1, 2, 3) if step == 1 else (0, 1, 4, 5), (1.0, 0.0, 1.0, 1.0), strict=True
            )
        ]
        sampler.write(step, sampler.records(step, picked, batch))
    return run.path


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_recorded_trajectories_become_rows_with_tools(run: Path, tmp_path: Path) -> None:
    out = tmp_path / "demos.jsonl"
    report = demos_from_run(str(run), out)
    assert report.min_reward == 0.5  # the run's [evaluation] pass_threshold
    assert (report.samples, report.kept, report.below_threshold, report.duplicates) == (8, 5, 2, 1)
    rows = _rows(out)
    assert [r["messages"][-1]["content"] for r in rows] == ["1", "3", "4", "5", "6"]
    first = rows[0]
    assert first["tools"] == TOOLS and first["reward"] == 1.0
    assert first["source"] == f"run:{run.name}/step1/r0/main"
    assert first["messages"][2]["tool_calls"][0]["function"]["arguments"] == '{"a": 0, "b": 1}'
    assert first["messages"][3] == {"role": "tool", "tool_call_id": "c0", "content": "1"}

    report = demos_from_run(f"{run}:2", out, min_reward=0.0)
    assert (report.samples, report.kept) == (4, 4)
    assert {r["source"].split("/")[1] for r in _rows(out)} == {"step2"}


def test_old_traces_bad_lines_and_missing_steps(run: Path, tmp_path: Path) -> None:
    trace = run / "traces" / "step_000001.jsonl"
    lines = trace.read_text().splitlines()
    old = json.loads(lines[0])
    del old["tools"]  # written before the trainer recorded tools specs
    trace.write_text("\n".join([json.dumps(old), "{torn", *lines[1:]]) + "\n")
    report = demos_from_run(f"{run}:1", tmp_path / "d.jsonl")
    assert report.kept == 3 and report.without_tools == 1 and report.unreadable == 1
    assert report.problems == [
        f"{trace}:2: not a trajectory record: not JSON (Expecting property name enclosed in "
        "double quotes at line 1 column 2); line skipped"
    ]
    assert "older osmosis" in "\n".join(report.lines())
    with pytest.raises(OsmosisError, match="no trajectories recorded for step 7 .* 1, 2"):
        demos_from_run(f"{run}:7", tmp_path / "d.jsonl")
    with pytest.raises(OsmosisError, match="no run named 'nope'"):
        demos_from_run("nope", tmp_path / "d.jsonl", root=run.parent)
