"""Trained checkpoints as models: find them across runs and resolve ``RUN[:STEP]``.

Torch-free: runs are read through the run store (:mod:`osmosis_ai.runs`). A checkpoint is
``<run>/checkpoints/step_NNNNNN/`` with ``adapter/`` (a standard PEFT folder:
``adapter_config.json`` + ``adapter_model.safetensors``) and ``checkpoint.json`` (the step's
metrics); the base model is the run's ``[experiment].model_path``. A run with ``[warm_start]``
also has ``<run>/checkpoints/warm/`` (the adapter RL started from, step 0), named ``RUN:warm``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from osmosis_ai.errors import UnreadableFileError
from osmosis_ai.runs import RunNotFoundError, RunRecord, find_run, list_runs
from osmosis_ai.safe_io import read_json_object, read_text, read_toml

__all__ = [
    "CheckpointRef",
    "ModelRefError",
    "find_checkpoints",
    "looks_like_checkpoint_ref",
    "resolve_checkpoint",
]


class ModelRefError(RunNotFoundError):
    """A ``RUN[:STEP]`` that names no run, several runs, or a step the run does not have."""


@dataclass(frozen=True)
class CheckpointRef:
    """One saved checkpoint of a training run."""

    run_id: str
    """The run folder's name (``<name>-<time>``): unique in the workspace."""
    run_name: str
    run_dir: Path
    step: int
    path: Path
    """The checkpoint folder (``checkpoints/step_NNNNNN``)."""
    base_model: str
    """The run's ``model_path``: ``embedded``, a model folder (made absolute) or a Hub id."""
    reward: float | None = None
    """The mean training reward of the checkpoint's step (``None`` when not recorded)."""
    status: str = "unknown"

    @property
    def adapter_dir(self) -> Path:
        """The PEFT adapter folder, loadable by ``PeftModel.from_pretrained`` and vLLM."""
        return self.path / "adapter"

    @property
    def is_warm(self) -> bool:
        """Whether this is the warm start's checkpoint (``checkpoints/warm``)."""
        return self.path.name == "warm"

    @property
    def label(self) -> str:
        """``<run_id>:<step>`` (``<run_id>:warm``): what to pass back as ``RUN:STEP``."""
        return f"{self.run_id}:{'warm' if self.is_warm else self.step}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "run": self.run_id,
            "run_name": self.run_name,
            "status": self.status,
            "step": self.step,
            "name": "warm" if self.is_warm else f"step_{self.step:06d}",
            "reward": self.reward,
            "base_model": self.base_model,
            "path": str(self.path),
            "adapter": str(self.adapter_dir),
        }


def _base_model(run: RunRecord) -> str:
    """The run's base model, from its config copy (a relative folder made absolute)."""
    model: str | None = None
    try:  # a snapshot that cannot be read safely (safe_io) is passed over
        _text, cfg = read_toml(run.path / "config.toml", under=run.path.parent)
        section = cfg.get("experiment")
        value = section.get("model_path") if isinstance(section, dict) else None
        model = value if isinstance(value, str) else None
    except UnreadableFileError:
        model = None
    if model is None:
        model = run.model if isinstance(run.model, str) else None
    if model is None:
        for cfg_file in sorted(run.path.glob("checkpoints/*/adapter/adapter_config.json")):
            try:
                value = read_json_object(cfg_file, under=run.path.parent).get(
                    "base_model_name_or_path"
                )
            except UnreadableFileError:
                continue
            model = value if isinstance(value, str) else model
    if model is None:
        return "unknown"
    p = Path(model).expanduser()
    if p.is_absolute() or model == "embedded":
        return model
    # A relative folder is relative to the workspace the run belongs to (runs/ sits in it).
    for root in (run.path.parent.parent, Path.cwd()):
        if (root / p).is_dir():
            return str((root / p).resolve())
    return model


def _checkpoints_of(run: RunRecord) -> list[CheckpointRef]:
    base = _base_model(run)
    return [
        CheckpointRef(
            run_id=run.run_id,
            run_name=run.name,
            run_dir=run.path,
            step=c.step,
            path=c.path,
            base_model=base,
            reward=c.reward,
            status=run.status,
        )
        for c in run.checkpoints()
        if (c.adapter / "adapter_config.json").is_file()
    ]


def _find(runs_root: Path, query: str) -> RunRecord:
    try:
        return find_run(runs_root, query)
    except RunNotFoundError as exc:
        raise ModelRefError(
            str(exc).replace("'osmosis train list'", "'osmosis model list'")
        ) from exc


def find_checkpoints(runs_root: Path, *, run: str | None = None) -> list[CheckpointRef]:
    """Every checkpoint under ``runs_root`` (or of one ``run``), runs oldest first, by step."""
    runs = [_find(runs_root, run)] if run is not None else list_runs(runs_root)
    return [c for r in runs for c in _checkpoints_of(r)]


def _split(spec: str) -> tuple[str, str | None]:
    head, sep, tail = spec.rpartition(":")
    if sep and head and (tail.isdigit() or tail in {"latest", "best", "warm"}):
        return head, tail
    return spec, None


def looks_like_checkpoint_ref(spec: str, runs_root: Path) -> bool:
    """Whether ``spec`` (``RUN[:STEP]``) names a run under ``runs_root``.

    Model ids and folders that are not runs keep their usual meaning, so ``--model`` still
    takes ``embedded``, folders, URLs and LiteLLM ids.
    """
    if spec.startswith(("http://", "https://")) or spec == "embedded" or Path(spec).is_dir():
        return False
    run, _ = _split(spec)
    return any(
        r.run_id == run or r.name == run or r.run_id.startswith(run) for r in list_runs(runs_root)
    )


def resolve_checkpoint(spec: str, runs_root: Path) -> CheckpointRef:
    """The checkpoint ``RUN[:STEP]`` names; STEP is a number, ``latest`` (default), ``best``
    or ``warm`` (the ``[warm_start]`` phase's adapter, before RL step 1).

    RUN is a run id (``calc-20261124-101500``), a run name used by exactly one run, or a unique
    prefix of a run id. ``best`` is the checkpoint with the highest recorded reward.
    """
    query, step = _split(spec.strip())
    run = _find(runs_root, query)
    checkpoints = _checkpoints_of(run)
    if not checkpoints:
        raise ModelRefError(
            f"run {run.run_id} ({run.status}) has no checkpoint yet (none under "
            f"{run.path / 'checkpoints'}); checkpoints are written every [checkpoints] "
            "checkpoint_save_freq steps and at the end"
        )
    if step is None or step == "latest":
        try:
            latest = run.path / "checkpoints" / "latest"
            name = read_text(latest, under=run.path.parent, max_bytes=4096).strip()
        except UnreadableFileError:
            name = ""
        return next((c for c in checkpoints if c.path.name == name), checkpoints[-1])
    if step == "warm":
        warm = next((c for c in checkpoints if c.is_warm), None)
        if warm is None:
            raise ModelRefError(
                f"run {run.run_id} has no warm-start checkpoint ({run.path / 'checkpoints' / 'warm'}"
                " is written when a [warm_start] phase finishes); its checkpoints are at steps "
                f"{', '.join(str(c.step) for c in checkpoints)}"
            )
        return warm
    if step == "best":
        scored = [c for c in checkpoints if c.reward is not None]
        if not scored:
            raise ModelRefError(
                f"run {run.run_id}: no checkpoint has a recorded reward; pass a step "
                f"({', '.join(str(c.step) for c in checkpoints)})"
            )
        return max(scored, key=lambda c: (c.reward or 0.0, c.step))
    wanted = int(step)
    for c in checkpoints:
        if c.step == wanted:
            return c
    raise ModelRefError(
        f"run {run.run_id} has no checkpoint at step {wanted}; its checkpoints are at steps "
        f"{', '.join(str(c.step) for c in checkpoints)}"
    )
