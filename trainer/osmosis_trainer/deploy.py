"""Serve a trained checkpoint on an OpenAI-compatible endpoint: ``osmosis model deploy``.

Run as ``python -m osmosis_trainer.deploy --base MODEL --adapter DIR --name NAME [--port P]``
(the CLI starts it so that core never imports the trainer). With vLLM installed (or
``--engine vllm``) a vLLM server serves the base model with the adapter as a LoRA module
named NAME; otherwise the transformers engine serves base + adapter behind the policy gateway.
Once the endpoint answers, one line says where it is::

    Serving calc-20261124-101500:40 at http://127.0.0.1:8000/v1 as model 'calc-step40' (hf engine)

It serves until interrupted (Ctrl-C or SIGTERM).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from osmosis_ai.errors import OsmosisError
from osmosis_ai.serving.gateway import CallStore

__all__ = ["main", "ready_line", "vllm_command"]

_VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


class _NoRecording(CallStore):
    """A deployed model answers clients; nobody collects its calls, so none are kept."""

    def add(self, call: Any, *, now: float | None = None) -> bool:
        return False


def _gateway_class() -> type[Any]:
    from osmosis_ai.serving.gateway import PolicyGateway

    class DeployedGateway(PolicyGateway):
        """Replies carry the name clients were told to send (no ``@v<version>`` tag: a
        deployed checkpoint never changes)."""

        @property
        def model_name(self) -> str:
            return self.policy_name

    return DeployedGateway


def ready_line(label: str, url: str, model: str, engine: str) -> str:
    return f"Serving {label} at {url}/v1 as model {model!r} ({engine} engine)"


def _announce(args: argparse.Namespace, url: str, engine: str) -> None:
    print(ready_line(args.label or args.name, url, args.name, engine), flush=True)
    print(
        f"  try: curl {url}/v1/chat/completions -H 'Content-Type: application/json' "
        f"-d '{json.dumps({'model': args.name, 'messages': [{'role': 'user', 'content': 'Hi'}]})}'",
        flush=True,
    )
    print("  Ctrl-C stops it.", flush=True)


async def _serve_hf(args: argparse.Namespace) -> None:
    from osmosis_ai.serving import create_engine

    engine = await asyncio.to_thread(create_engine, args.base, device=args.device)
    try:
        await engine.load_adapter(str(args.adapter), 1)
        gateway = _gateway_class()(
            engine, host=args.host, port=args.port, policy_name=args.name,
            max_body_bytes=args.max_body_bytes,
        )
        gateway.store = _NoRecording()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        async with gateway:
            _announce(args, gateway.url, "hf")
            await stop.wait()
    finally:
        await engine.close()


def _base_folder(base: str, adapter: Path) -> str:
    """vLLM needs a model folder: the embedded GGUF model is saved as one next to the run."""
    from osmosis_trainer.models import is_embedded, load_model

    if not is_embedded(base):
        return base
    folder = adapter.parents[2] / "base_model"  # <run>/checkpoints/step_N/adapter -> <run>
    if not (folder / "config.json").exists():
        loaded = load_model(base)
        loaded.model.save_pretrained(str(folder))
        loaded.tokenizer.save_pretrained(str(folder))
    return str(folder)


def vllm_command(args: argparse.Namespace, base_folder: str, port: int, *, cuda: bool) -> list[str]:
    """The vLLM OpenAI server command serving ``base_folder`` with the adapter as LoRA module
    ``args.name`` (the adapter's rank rounded up to one vLLM supports)."""
    config = json.loads((args.adapter / "adapter_config.json").read_text())
    rank_wanted = int(config.get("r", 16))
    rank = next((r for r in _VLLM_LORA_RANKS if r >= rank_wanted), rank_wanted)
    return [
        os.environ.get("OSMOSIS_VLLM_PYTHON") or sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        base_folder,
        "--served-model-name",
        "base",
        "--host",
        args.host,
        "--port",
        str(port),
        # On CPU, vLLM serves fp32 weights as they are (the trainer's choice as well).
        "--dtype",
        "auto" if cuda else "float32",
        "--enable-lora",
        "--max-lora-rank",
        str(rank),
        "--lora-modules",
        f"{args.name}={args.adapter}",
    ]


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _serve_vllm(args: argparse.Namespace) -> int:
    import httpx
    import torch

    port = args.port or _free_port(args.host)
    cmd = vllm_command(
        args, _base_folder(args.base, args.adapter), port, cuda=torch.cuda.is_available()
    )
    env = {**os.environ}
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    proc = subprocess.Popen(cmd, env=env)
    url = f"http://{args.host}:{port}"
    try:
        # The server logs its own progress; announce once it answers (or report its exit).
        while proc.poll() is None:
            try:
                ready = httpx.get(f"{url}/health", timeout=2).status_code == 200
            except httpx.TransportError:
                ready = False
            if ready:
                _announce(args, url, "vllm")
                break
            time.sleep(0.5)
        return proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        return proc.wait()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m osmosis_trainer.deploy", description=__doc__)
    p.add_argument("--base", required=True, help="Base model: embedded, a folder or a Hub id.")
    p.add_argument("--adapter", required=True, type=Path, help="The PEFT adapter folder.")
    p.add_argument("--name", required=True, help="The model name clients send.")
    p.add_argument("--label", default=None, help="What to call the checkpoint in messages.")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000, help="0 picks a free port (hf engine).")
    p.add_argument("--engine", choices=("auto", "hf", "vllm"), default="auto")
    p.add_argument("--device", default="auto", help="hf engine: auto, cpu, cuda, ...")
    p.add_argument("--max-body-bytes", type=int, default=None,
                   help="hf engine: largest request body (default: [gateway] max_body_bytes).")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not (args.adapter / "adapter_config.json").is_file():
        print(f"error: {args.adapter} is not a PEFT adapter folder", file=sys.stderr)
        return 1
    engine = args.engine
    if engine == "auto":
        has_vllm = importlib.util.find_spec("vllm") is not None or bool(
            os.environ.get("OSMOSIS_VLLM_PYTHON")
        )
        engine = "vllm" if has_vllm else "hf"
    try:
        if engine == "vllm":
            return _serve_vllm(args)
        asyncio.run(_serve_hf(args))
    except OsmosisError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except (OSError, RuntimeError) as exc:
        print(f"error: cannot serve on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
