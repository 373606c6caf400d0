"""Experiment trackers beside ``metrics.jsonl``: ``[logging] report_to = [...]``.

TensorBoard is written by :class:`~osmosis_trainer.loop._metrics.MetricsWriter` itself; this
module adds Weights & Biases and MLflow (optional extras ``wandb`` / ``mlflow``). Every
tracker gets the same names: ``<kind>/<metric>`` (``train/reward_mean``,
``eval/val_reward_mean``, ``train/failed/timeout``), at the step of the record.

- W&B: ``WANDB_MODE`` decides (``offline`` writes ``<run>/wandb`` for a later ``wandb sync``);
  without it, and without ``WANDB_API_KEY``, the run is logged offline rather than prompting
  for a login in a worker that has no terminal.
- MLflow: ``MLFLOW_TRACKING_URI`` decides (a server, ``sqlite:///...``); without it, a file
  store in ``<run>/mlruns`` (``MLFLOW_ALLOW_FILE_STORE=true mlflow ui --backend-store-uri
  <run>/mlruns``).
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from osmosis_ai.config import redact_config
from osmosis_ai.errors import MissingExtraError

__all__ = ["MLflowTracker", "Tracker", "WandbTracker", "open_trackers"]

logger = logging.getLogger("osmosis")


class Tracker(Protocol):
    def log(self, step: int, kind: str, metrics: Mapping[str, Any]) -> None: ...

    def close(self, status: str = "finished") -> None: ...


def _scalars(kind: str, metrics: Mapping[str, Any]) -> dict[str, float]:
    out = {}
    for key, value in metrics.items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            if math.isfinite(float(value)):
                out[f"{kind}/{key}"] = float(value)
    return out


class WandbTracker:
    """One W&B run per osmosis run (resumed by id when the osmosis run resumes)."""

    def __init__(self, run_path: Path, run_id: str, project: str, config: Mapping[str, Any]):
        try:
            import wandb
        except ImportError as exc:
            raise MissingExtraError('[logging] report_to = ["wandb"]', "wandb", "wandb") from exc
        mode = os.environ.get("WANDB_MODE") or (
            "online" if os.environ.get("WANDB_API_KEY") else "offline"
        )
        self._run = wandb.init(
            project=project, name=run_id, id=run_id, resume="allow", dir=str(run_path),
            config=dict(config), mode=mode,  # type: ignore[arg-type,unused-ignore]
        )
        logger.info("W&B run %s (%s mode)", run_id, mode)

    def log(self, step: int, kind: str, metrics: Mapping[str, Any]) -> None:
        self._run.log(_scalars(kind, metrics), step=step)

    def close(self, status: str = "finished") -> None:
        self._run.finish(exit_code=0 if status == "finished" else 1)


class MLflowTracker:
    """One MLflow run per osmosis run, in the experiment named by ``[logging] project``."""

    def __init__(self, run_path: Path, run_id: str, project: str, config: Mapping[str, Any]):
        try:
            import mlflow
        except ImportError as exc:
            raise MissingExtraError('[logging] report_to = ["mlflow"]', "mlflow", "mlflow") from exc
        self._mlflow = mlflow
        uri = os.environ.get("MLFLOW_TRACKING_URI") or ""
        if not uri:
            # The run's own file store: no server and no database needed. MLflow 3 keeps it
            # in maintenance mode behind an opt-in, given here only for this default.
            uri = (Path(run_path) / "mlruns").as_uri()
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self._client = mlflow.MlflowClient(tracking_uri=uri)
        experiment = self._client.get_experiment_by_name(project)
        experiment_id = (
            experiment.experiment_id if experiment is not None
            else self._client.create_experiment(project)
        )
        found = self._client.search_runs(
            [experiment_id], filter_string=f"tags.`osmosis.run_id` = '{run_id}'", max_results=1
        )
        if found:
            self.run_id = found[0].info.run_id
        else:
            run = self._client.create_run(
                experiment_id, run_name=run_id, tags={"osmosis.run_id": run_id}
            )
            self.run_id = run.info.run_id
            params = {k: str(v)[:500] for k, v in _flatten(config).items()}
            if params:
                from mlflow.entities import Param

                self._client.log_batch(
                    self.run_id, params=[Param(k, v) for k, v in params.items()]
                )
        self.uri = uri

    def log(self, step: int, kind: str, metrics: Mapping[str, Any]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        values = [Metric(k, v, now, step) for k, v in _scalars(kind, metrics).items()]
        if values:
            self._client.log_batch(self.run_id, metrics=values)

    def close(self, status: str = "finished") -> None:
        self._client.set_terminated(self.run_id, "FINISHED" if status == "finished" else "FAILED")


def _flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flatten(value, f"{name}."))
        elif value is not None:
            out[name] = value
    return out


def open_trackers(
    report_to: Iterable[str],
    run_path: Path,
    run_id: str,
    *,
    project: str,
    config: Mapping[str, Any] | None = None,
) -> list[Tracker]:
    """The W&B / MLflow trackers named in ``report_to`` (TensorBoard is not one of these).

    ``config`` is sent with its secrets redacted (``[env]`` values, ``api_key`` ...): a
    tracker's config page is shared with everyone who sees the project.
    """
    config = redact_config(config or {})
    out: list[Tracker] = []
    for name in report_to:
        if name == "wandb":
            out.append(WandbTracker(run_path, run_id, project, config or {}))
        elif name == "mlflow":
            out.append(MLflowTracker(run_path, run_id, project, config or {}))
    return out
