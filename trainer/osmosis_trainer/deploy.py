"""Serve a trained checkpoint on an OpenAI-compatible endpoint: ``osmosis model deploy``.

Run as ``python -m osmosis_trainer.deploy --base MODEL --adapter DIR --name NAME [--port P]``
(the CLI starts it so that core never imports the trainer). Clients always talk to the
policy gateway, the same front as training and eval: it renders every prompt with the
engine's :class:`~osmosis_trainer.engines.ChatRenderer`, so a deployed adapter sees the
prompts it was trained on. Behind it, with vLLM installed (or ``--engine vllm``), a vLLM
server on loopback (its own random key) serves the base model with the adapter as a runtime
LoRA module, fed token ids; otherwise the transformers engine serves base + adapter.
``$OSMOSIS_DEPLOY_API_KEY`` (set by you, or by ``osmosis model deploy --api-key-file``) is the
key clients must send; it travels in the environment, never on a command line. vLLM's log goes
to ``<run>/deploy/vllm-<pid>.log`` (mode 0600). Once the endpoint answers, one line
says where it is::

    Serving calc-20261124-101500:40 at http://127.0.0.1:8000/v1 as model 'calc-step40' (hf engine)

It serves until interrupted (Ctrl-C or SIGTERM).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import ipaddress
import json
import os
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

from osmosis_ai.errors import OsmosisError
from osmosis_ai.safe_io import read_json_object
from osmosis_ai.serving.gateway import CallStore

__all__ = ["API_KEY_ENV", "deploy_log", "exposure_warning", "main", "ready_line", "vllm_options"]

API_KEY_ENV = "OSMOSIS_DEPLOY_API_KEY"

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


def exposure_warning(host: str, api_key: str | None) -> str | None:
    """The warning for serving on ``host`` without a key: any address but loopback lets
    other machines (and web pages, through DNS rebinding) use the model."""
    if api_key:
        return None
    try:
        loopback = ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if loopback:
        return None
    return (
        f"warning: serving on {host} without an API key: anyone who can reach this port can "
        "use the model. Set $OSMOSIS_DEPLOY_API_KEY (or pass --api-key-file FILE), or bind "
        "127.0.0.1."
    )


def _announce(args: argparse.Namespace, url: str, engine: str, keyed: bool) -> None:
    print(ready_line(args.label or args.name, url, args.name, engine), flush=True)
    auth = " -H \"Authorization: Bearer $OSMOSIS_DEPLOY_API_KEY\"" if keyed else ""
    print(
        f"  try: curl {url}/v1/chat/completions -H 'Content-Type: application/json'{auth} "
        f"-d '{json.dumps({'model': args.name, 'messages': [{'role': 'user', 'content': 'Hi'}]})}'",
        flush=True,
    )
    print("  Ctrl-C stops it.", flush=True)


async def _serve(args: argparse.Namespace, engine: Any, kind: str) -> None:
    """Load the adapter into ``engine`` and serve it behind the gateway until a signal."""
    api_key = os.environ.get(API_KEY_ENV) or None
    try:
        await engine.load_adapter(str(args.adapter), 1)
        gateway = _gateway_class()(
            engine, host=args.host, port=args.port, policy_name=args.name,
            max_body_bytes=args.max_body_bytes, api_key=api_key,
        )
        gateway.store = _NoRecording()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        async with gateway:
            _announce(args, gateway.url, kind, keyed=api_key is not None)
            await stop.wait()
    finally:
        await engine.close()


async def _serve_hf(args: argparse.Namespace) -> None:
    from osmosis_ai.serving import create_engine

    engine = await asyncio.to_thread(create_engine, args.base, device=args.device)
    await _serve(args, engine, "hf")


async def _serve_vllm(args: argparse.Namespace) -> None:
    import torch

    from osmosis_trainer.engines import VLLMEngine

    folder = await asyncio.to_thread(_base_folder, args.base, args.adapter)
    options = vllm_options(args, folder, cuda=torch.cuda.is_available())
    print(f"starting vLLM on loopback behind the gateway (its log: {options['log_file']})",
          file=sys.stderr, flush=True)
    await _serve(args, VLLMEngine(**options), "vllm")


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


def vllm_options(args: argparse.Namespace, base_folder: str, *, cuda: bool) -> dict[str, Any]:
    """``VLLMEngine`` launch arguments serving ``base_folder`` on loopback, with room for the
    adapter's rank (rounded up to one vLLM supports)."""
    # safe_io: a regular file of the adapter folder (no link, FIFO, huge or deep file).
    config = read_json_object(args.adapter / "adapter_config.json", under=args.adapter)
    rank_wanted = int(config.get("r", 16))
    rank = next((r for r in _VLLM_LORA_RANKS if r >= rank_wanted), rank_wanted)
    return {
        "model_path": base_folder,
        "python": os.environ.get("OSMOSIS_VLLM_PYTHON") or None,
        # On CPU, vLLM serves fp32 weights as they are (the trainer's choice as well).
        "dtype": "auto" if cuda else "float32",
        "max_lora_rank": rank,
        "max_loras": 1,
        "log_file": deploy_log(args.adapter),
    }


def deploy_log(adapter: Path) -> Path:
    """Where a deployed vLLM server writes its log: ``<run>/deploy/vllm-<pid>.log`` for a
    checkpoint of a run (``<run>/checkpoints/step_N/adapter``), else a fresh private temporary
    folder; never a predictable name in a shared ``/tmp`` (the file is opened 0600, no link)."""
    run = adapter.resolve().parents[2] if len(adapter.resolve().parents) > 2 else None
    if run is not None and (run / "status.json").is_file():
        folder = run / "deploy"
        folder.mkdir(mode=0o700, exist_ok=True)
    else:
        folder = Path(tempfile.mkdtemp(prefix="osmosis-deploy-"))
    return folder / f"vllm-{os.getpid()}.log"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m osmosis_trainer.deploy", description=__doc__)
    p.add_argument("--base", required=True, help="Base model: embedded, a folder or a Hub id.")
    p.add_argument("--adapter", required=True, type=Path, help="The PEFT adapter folder.")
    p.add_argument("--name", required=True, help="The model name clients send.")
    p.add_argument("--label", default=None, help="What to call the checkpoint in messages.")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000, help="0 picks a free port.")
    p.add_argument("--engine", choices=("auto", "hf", "vllm"), default="auto")
    p.add_argument("--device", default="auto", help="hf engine: auto, cpu, cuda, ...")
    p.add_argument("--max-body-bytes", type=int, default=None,
                   help="Largest request body (default: [gateway] max_body_bytes).")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not (args.adapter / "adapter_config.json").is_file():
        print(f"error: {args.adapter} is not a PEFT adapter folder", file=sys.stderr)
        return 1
    if (warning := exposure_warning(args.host, os.environ.get(API_KEY_ENV))) is not None:
        print(warning, file=sys.stderr, flush=True)
    engine = args.engine
    if engine == "auto":
        has_vllm = importlib.util.find_spec("vllm") is not None or bool(
            os.environ.get("OSMOSIS_VLLM_PYTHON")
        )
        engine = "vllm" if has_vllm else "hf"
    try:
        asyncio.run(_serve_vllm(args) if engine == "vllm" else _serve_hf(args))
    except OsmosisError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except (OSError, RuntimeError) as exc:
        print(f"error: cannot serve on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
