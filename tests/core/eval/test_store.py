"""Reading eval runs back: the status of a comparison whose baseline is still running."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from osmosis_ai.eval import EvalRunInfo, list_eval_runs
from osmosis_ai.runs._process import describe_process


def _info(status: str, worker: dict[str, Any], baseline: str | None = None) -> str:
    return EvalRunInfo(
        config_path="c.toml",
        config_name="calc",
        rollout_dir="r",
        entrypoint="e",
        dataset="d",
        model="m",
        n=1,
        limit=None,
        pass_threshold=1.0,
        rollout_hash="x",
        dataset_hash="y",
        started_at="2026-11-24T01:00:00+00:00",
        status=status,  # type: ignore[arg-type]
        worker=worker,
        baseline=baseline,
    ).model_dump_json()


def _dead() -> dict[str, Any]:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return describe_process(proc.pid)


def test_a_comparison_is_running_until_its_comparison_is_written(tmp_path: Path) -> None:
    root = tmp_path / "evals"
    me = describe_process()
    cases = {
        "plain": (_info("completed", me), None, False),
        "base-not-started": (_info("completed", me, "embedded"), None, False),
        "base-running": (_info("completed", me, "embedded"), _info("running", me), False),
        "base-crashed": (_info("completed", _dead(), "embedded"), _info("running", _dead()), False),
        "worker-gone": (_info("completed", _dead(), "embedded"), None, False),
        "compared": (_info("completed", me, "embedded"), _info("completed", me), True),
    }
    for name, (info, base, compared) in cases.items():
        run = root / name
        run.mkdir(parents=True)
        (run / "run.json").write_text(info)
        if base is not None:
            (run / "baseline").mkdir()
            (run / "baseline/run.json").write_text(base)
        if compared:
            (run / "comparison.json").write_text(json.dumps({"diff": 0.1}))
    status = {v.name: v.status for v in list_eval_runs(root)}
    assert status == {
        "plain": "completed",
        "base-not-started": "running",
        "base-running": "running",
        "base-crashed": "crashed",
        "worker-gone": "crashed",
        "compared": "completed",
    }
