"""An eval run folder written the way ``osmosis eval run`` writes it, for dashboard tests."""

from __future__ import annotations

from pathlib import Path

from osmosis_ai.eval._records import EvalRecord, EvalRunInfo


def write_eval_run(root: Path, name: str, model: str, rewards: list[float | None]) -> None:
    """``root/name`` with ``run.json`` and one result per reward (``None``: a timed-out row)."""
    folder = root / name
    folder.mkdir(parents=True)
    info = EvalRunInfo(
        config_path="configs/eval.toml", config_name="eval", rollout_dir="calc",
        entrypoint="main.py", dataset="calc.jsonl", model=model, n=1, limit=None,
        pass_threshold=1.0, rollout_hash="r", dataset_hash="d", started_at=name,
        status="completed", work_items=len(rewards),
    )
    (folder / "run.json").write_text(info.model_dump_json())
    records = [
        EvalRecord(row_index=i, run_index=0, rollout_id=f"r{i}", sample_id="main",
                   status="success", reward=r, passed=r >= 1.0)
        if r is not None else
        EvalRecord(row_index=i, run_index=0, rollout_id=f"r{i}", status="failed",
                   error_type="timeout", error="took too long")
        for i, r in enumerate(rewards)
    ]
    (folder / "results.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in records))
