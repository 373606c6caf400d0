"""The file formats of a local evaluation: one result record per sample, the run manifest."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["EvalRecord", "EvalRunInfo", "RecordStatus"]

RecordStatus = Literal["success", "failed", "skipped"]


class EvalRecord(BaseModel):
    """One sample of one (row, run) work item: a line of ``results.jsonl``.

    A rollout that fails before producing any sample gets one record with ``sample_id`` ``None``.
    ``reward`` is ``None`` unless the status is ``success``: a failure is never scored 0.0.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    row_index: int = Field(description="Position of the row in the selected dataset.")
    source_row_index: int | None = Field(default=None, description="Position in the file.")
    run_index: int = Field(description="Which of the n runs of this row (0-based).")
    rollout_id: str
    sample_id: str | None = None
    status: RecordStatus
    reward: float | None = None
    passed: bool | None = Field(default=None, description="reward >= pass_threshold.")
    tokens: int = Field(default=0, description="Prompt + completion tokens of the sample's calls.")
    prompt_tokens: int = 0
    completion_tokens: int = 0
    num_calls: int = Field(default=0, description="Policy calls (turns) of the sample.")
    tool_calls: int = Field(default=0, description="Tool calls the policy emitted in them.")
    duration_ms: float = 0.0
    error_type: str | None = Field(default=None, description="The failure category, if failed.")
    error: str | None = None
    trace: str | None = Field(default=None, description="Trace file, relative to the run dir.")
    judge: dict[str, float] = Field(
        default_factory=dict,
        description="LLM-judge usage for this sample (osmosis_ai.grading): calls, cache_hits, "
        "prompt_tokens, completion_tokens, cost_usd, ...",
    )


class EvalRunInfo(BaseModel):
    """``run.json``: what was evaluated, with fingerprints that ``--resume`` checks."""

    model_config = ConfigDict(extra="forbid")

    version: int = 1
    config_path: str
    config_name: str
    rollout_dir: str
    entrypoint: str
    dataset: str
    model: str
    """The model asked for; a trained checkpoint is recorded as ``<run folder>:<step>``."""
    engine_model: str | None = None
    """What the engine loaded (a checkpoint's base model), when it differs from ``model``."""
    checkpoint: dict[str, Any] | None = None
    """The evaluated checkpoint: run, step, path, base_model, reward."""
    rows: list[int] | None = None
    """The ``--rows`` selection (0-based file positions), if any."""
    n: int
    limit: int | None
    offset: int = 0
    pass_threshold: float
    rollout_hash: str
    dataset_hash: str
    started_at: str
    status: Literal["running", "interrupted", "completed", "failed"] = "running"
    finished_at: str | None = None
    work_items: int = 0
    model_load_s: float | None = Field(default=None, description="Seconds to start the model.")
    osmosis_version: str = ""
    pid: int | None = Field(default=None, description="The process running (or that ran) it.")
    worker: dict[str, Any] | None = Field(
        default=None, description="pid, host, boot id and start time of that process."
    )
    baseline: str | None = Field(
        default=None, description="The model of the paired baseline run in ./baseline/, if any."
    )
    summary: dict[str, Any] | None = None
