"""W&B (offline mode) and MLflow (local file store) get the metric names of metrics.jsonl."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from osmosis_trainer.loop._metrics import MetricsWriter
from osmosis_trainer.trackers import open_trackers

RECORDS: list[tuple[int, str, dict[str, Any]]] = [
    (1, "train", {"reward_mean": 0.25, "kl": 0.01, "failed/timeout": 1.0, "note": "x"}),
    (2, "train", {"reward_mean": 0.5, "kl": 0.02}),
    (2, "eval", {"val_reward_mean": 0.4}),
]


def _write(run: Path, report_to: list[str]) -> None:
    trackers = open_trackers(report_to, run, run.name, project="osmosis-test",
                             config={"training": {"lr": 1e-4}, "experiment": {"rollout": "calc"}})
    writer = MetricsWriter(run, tensorboard=False, trackers=trackers)
    for step, kind, metrics in RECORDS:
        writer.write(step, metrics, kind=kind)
    writer.close()


def test_mlflow_file_store_has_every_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mlflow")
    from mlflow import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    run = tmp_path / "calc-20260101-000000"
    run.mkdir()
    _write(run, ["mlflow"])
    client = MlflowClient(tracking_uri=(run / "mlruns").as_uri())
    experiment = client.get_experiment_by_name("osmosis-test")
    assert experiment is not None
    (found,) = client.search_runs([experiment.experiment_id])
    assert found.info.run_name == run.name and found.info.status == "FINISHED"
    history = client.get_metric_history(found.info.run_id, "train/reward_mean")
    assert [(m.step, m.value) for m in history] == [(1, 0.25), (2, 0.5)]
    assert [m.value for m in client.get_metric_history(found.info.run_id, "train/failed/timeout")] \
        == [1.0]
    assert [m.value for m in client.get_metric_history(found.info.run_id, "eval/val_reward_mean")] \
        == [0.4]
    assert found.data.params["training.lr"] == "0.0001"
    # A resumed run logs into the same MLflow run.
    _write(run, ["mlflow"])
    assert len(client.search_runs([experiment.experiment_id])) == 1


def test_wandb_offline_run_has_the_same_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run = tmp_path / "calc-20260101-000001"
    run.mkdir()
    _write(run, ["wandb"])
    import wandb

    wandb.teardown()  # waits for W&B's service process to exit: its log is complete on disk
    (offline,) = (run / "wandb").glob("offline-run-*")
    # The offline transaction log (what 'wandb sync' uploads): protobuf records whose history
    # items carry each key and its JSON value as plain bytes.
    (log,) = offline.glob("run-*.wandb")
    data = log.read_bytes()
    for key in ("train/reward_mean", "train/kl", "train/failed/timeout", "eval/val_reward_mean"):
        assert key.encode() in data, key
    for value in (b"0.25", b"0.5", b"0.02", b"0.4"):
        assert value in data, value
    assert b"train/note" not in data  # only numbers are logged
    # the run's config, as JSON (wandb 0.19 writes it with a space after the colon)
    assert re.search(rb'"rollout": ?"calc"', data)


def test_unknown_extra_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_wandb(name: str, *args: object, **kwargs: object) -> object:
        if name == "wandb":
            raise ImportError("no wandb")
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_wandb)
    with pytest.raises(ImportError, match=r'pip install "osmosis-ai\[wandb\]"'):
        open_trackers(["wandb"], tmp_path, "r", project="p")
