"""``eval run --model RUN[:STEP]`` and ``--baseline``, against a scripted server (no model).

The fake endpoint answers every question right when it serves an adapter (the "trained"
checkpoint) and wrong for the base model, so the comparison's outcome is known.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from osmosis_ai.errors import ConfigError
from osmosis_ai.eval import (
    EvalOptions,
    baseline_for,
    read_journal,
    resolve_model,
    run_eval,
    run_paired_eval,
)
from osmosis_ai.models import ModelRefError, find_checkpoints, resolve_checkpoint
from osmosis_ai.templates import create_from_template
from osmosis_ai.testing import FakeRequest
from tests.core.eval._helpers import fake_server_factory, make_run
from tests.core.eval.test_run import _truth


def _right(req: FakeRequest) -> str:
    question = next(m["content"] for m in req.messages if m["role"] == "user")
    return str(_truth(question))


def _wrong(req: FakeRequest) -> str:
    return str(int(_right(req)) + 1)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    create_from_template("single-call", "calc", tmp_path)
    make_run(tmp_path, "calc-20261124-010000", steps=(2, 4, 6), rewards=(0.1, 0.7, 0.4))
    make_run(tmp_path, "other-20261124-020000", steps=(1,), name="other")
    return tmp_path


def test_refs_resolve_latest_best_and_numbered_steps(workspace: Path) -> None:
    runs = workspace / "runs"
    assert resolve_checkpoint("calc", runs).step == 6
    assert resolve_checkpoint("calc:latest", runs).step == 6
    assert resolve_checkpoint("calc:best", runs).step == 4
    ref = resolve_checkpoint("calc-20261124-010000:2", runs)
    assert ref.step == 2 and ref.reward == pytest.approx(0.1)
    assert ref.adapter_dir == runs / "calc-20261124-010000/checkpoints/step_000002/adapter"
    assert ref.base_model == "embedded" and ref.label == "calc-20261124-010000:2"
    listed = find_checkpoints(runs)
    assert [(c.run_name, c.step) for c in listed] == [
        ("calc", 2),
        ("calc", 4),
        ("calc", 6),
        ("other", 1),
    ]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("calc:5", "no checkpoint at step 5; its checkpoints are at steps 2, 4, 6"),
        ("other:best", "no checkpoint has a recorded reward"),
    ],
)
def test_ref_errors_name_the_fix(workspace: Path, spec: str, message: str) -> None:
    with pytest.raises(ModelRefError, match=message):
        resolve_checkpoint(spec, workspace / "runs")


def test_a_name_used_by_two_runs_lists_both(workspace: Path) -> None:
    make_run(workspace, "calc-20261124-030000", steps=(1,))
    with pytest.raises(ModelRefError, match="matches 2 runs: calc-20261124-010000 .*, calc-2026"):
        resolve_checkpoint("calc", workspace / "runs")


def test_model_specs_that_are_not_runs_keep_their_meaning(workspace: Path) -> None:
    for spec in ("embedded", "openai/gpt-4o-mini", "http://127.0.0.1:8000/v1"):
        assert resolve_model(spec, workspace / "runs") == (spec, spec, None, None)
    label, engine, adapter, info = resolve_model("calc:4", workspace / "runs")
    assert label == "calc-20261124-010000:4" and engine == "embedded"
    assert adapter is not None and adapter.name == "adapter" and info is not None
    assert info["step"] == 4 and info["reward"] == pytest.approx(0.7)


async def test_eval_of_a_checkpoint_serves_its_adapter_on_the_base(workspace: Path) -> None:
    calls: list[tuple[str, Path | None]] = []
    out = workspace / "out"
    result = await run_eval(
        workspace / "configs/eval/calc.toml",
        EvalOptions(limit=3, model="calc:4", output=out),
        endpoint_factory=fake_server_factory(_wrong, adapter_script=_right, calls=calls),
    )
    ckpt = workspace / "runs/calc-20261124-010000/checkpoints/step_000004"
    assert calls == [("embedded", ckpt / "adapter")]
    assert result.summary.reward.mean == 1.0
    info = json.loads((out / "run.json").read_text())
    assert info["model"] == "calc-20261124-010000:4" and info["engine_model"] == "embedded"
    assert info["checkpoint"]["step"] == 4 and info["checkpoint"]["path"] == str(ckpt)


async def test_baseline_runs_the_same_rows_and_reports_a_paired_interval(
    workspace: Path,
) -> None:
    calls: list[tuple[str, Path | None]] = []
    config = workspace / "configs/eval/calc.toml"
    options = EvalOptions(n=2, model="calc:best", rows="0-9,15", name="cmp")
    base = baseline_for(config, options)
    assert base == "embedded"
    paired = await run_paired_eval(
        config,
        options,
        base,
        endpoint_factory=fake_server_factory(_wrong, adapter_script=_right, calls=calls),
    )
    assert [c[1] is not None for c in calls] == [True, False]
    run_dir = workspace / ".osmosis/evals/cmp"
    cand = read_journal(run_dir / "results.jsonl")
    base_records = read_journal(run_dir / "baseline/results.jsonl")
    key = sorted((r.row_index, r.run_index) for r in cand)
    assert key == sorted((r.row_index, r.run_index) for r in base_records)
    assert {r.row_index for r in cand} == set(range(10)) | {15}
    cmp = paired.comparison
    assert cmp.rows == 11 and cmp.diff == pytest.approx(1.0)
    assert cmp.ci_low == pytest.approx(1.0) and cmp.ci_high == pytest.approx(1.0)
    assert cmp.verdict == "better"
    saved = json.loads((run_dir / "comparison.json").read_text())
    assert saved["candidate"] == "calc-20261124-010000:4" and saved["baseline"] == "embedded"
    assert json.loads((run_dir / "run.json").read_text())["baseline"] == "embedded"

    # Running the named comparison again continues it: nothing left to evaluate.
    calls.clear()
    again = await run_paired_eval(
        config,
        EvalOptions(model="calc:best", name="cmp"),
        base,
        endpoint_factory=fake_server_factory(_wrong, adapter_script=_right, calls=calls),
    )
    assert calls == [] and again.candidate.resumed_records == 22
    assert again.comparison.diff == pytest.approx(1.0)


def test_baseline_needs_a_checkpoint(workspace: Path) -> None:
    with pytest.raises(ConfigError, match=r"--baseline compares a trained checkpoint"):
        baseline_for(workspace / "configs/eval/calc.toml", EvalOptions(model="embedded"))
