"""VLLMEngine: a vLLM OpenAI server launched as a child process, with runtime LoRA."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from osmosis_ai.serving import EngineError, OpenAIServerEngine
from osmosis_ai.serving.toolcalls import detect_family

__all__ = ["VLLMEngine", "tool_call_parser_for"]

logger = logging.getLogger("osmosis")


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


# Special tokens vLLM's parser of each family looks up in the vocabulary (it refuses to run
# without them); llama3_json reads plain JSON.
_PARSER_TOKENS = {"hermes": ("<tool_call>", "</tool_call>"), "mistral": ("[TOOL_CALLS]",)}


def tool_call_parser_for(model_path: str | Path) -> str | None:
    """vLLM's tool-call parser for the model folder's chat template (its family, see
    :func:`osmosis_ai.serving.toolcalls.detect_family`), or ``None`` when the tokenizer lacks
    the special tokens that parser needs (tool calls are then parsed from the text)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_path))
    template = getattr(tokenizer, "chat_template", None)
    family = detect_family(template if isinstance(template, str) else None)
    vocab = tokenizer.get_vocab()
    if all(token in vocab for token in _PARSER_TOKENS.get(family, ())):
        return family
    return None


def _tail(path: Path | None, n: int = 2000) -> str:
    if path is None or not path.exists():
        return ""
    return path.read_text(errors="replace")[-n:]


class VLLMEngine(OpenAIServerEngine):
    """Generate through a vLLM OpenAI-compatible server, launched here or attached by URL.

    Attach with ``VLLMEngine(base_url="http://host:8000")`` (the same as
    :class:`~osmosis_ai.serving.OpenAIServerEngine`), or launch one with
    ``VLLMEngine(model_path="folder")``: the server runs as a child process
    (``python -m vllm.entrypoints.openai.api_server``, LoRA enabled, runtime adapter loading
    on, ``--logprobs-mode processed_logprobs``) until :meth:`close`.

    Args:
        base_url: the server to attach to (with or without a trailing ``/v1``).
        model: the served base model name (attach mode: discovered from ``/v1/models``).
        model_path: launch mode: the model folder to serve.
        python: the interpreter that has vLLM (launch mode; default: this one).
        extra_args: more server arguments (launch mode).
        tool_call_parser: vLLM's ``--tool-call-parser`` (launch mode; default: the family of
            the model's chat template, see :func:`tool_call_parser_for`), so the server
            returns structured tool calls; ``""`` leaves the server without one (calls are
            then parsed from the text in the Hermes format).
        max_lora_rank, max_loras, max_model_len, dtype: server settings (launch mode).
        startup_timeout_s: how long to wait for a launched server to become ready.
        request_timeout_s: per-request timeout.
        api_key: sent as a bearer token.
    """

    def __init__(
        self,
        base_url: str | None = None,
        *,
        model: str | None = None,
        model_path: str | Path | None = None,
        python: str | None = None,
        extra_args: list[str] | None = None,
        tool_call_parser: str | None = None,
        max_lora_rank: int = 16,
        max_loras: int = 2,
        max_model_len: int | None = None,
        dtype: str = "auto",
        host: str = "127.0.0.1",
        startup_timeout_s: float = 900.0,
        request_timeout_s: float = 600.0,
        api_key: str | None = None,
        log_file: str | Path | None = None,
    ) -> None:
        if (base_url is None) == (model_path is None):
            raise ValueError("give exactly one of base_url (attach) or model_path (launch)")
        self.model_path = Path(model_path) if model_path is not None else None
        super().__init__(
            base_url,
            model=model or (self.model_path.name if self.model_path else None),
            request_timeout_s=request_timeout_s,
            api_key=api_key,
        )
        self._python = python or sys.executable
        self._extra_args = list(extra_args or [])
        self._tool_call_parser = tool_call_parser
        self._server_opts = (max_lora_rank, max_loras, max_model_len, dtype)
        self._host = host
        self._startup_timeout_s = startup_timeout_s
        self._log_file = Path(log_file) if log_file else None
        self._proc: subprocess.Popen[bytes] | None = None

    def _launch_command(self, port: int) -> list[str]:
        assert self.model_path is not None
        rank, loras, max_len, dtype = self._server_opts
        cmd = [
            self._python,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(self.model_path),
            "--served-model-name",
            str(self._base_model),
            "--host",
            self._host,
            "--port",
            str(port),
            "--dtype",
            dtype,
            "--enable-lora",
            "--max-loras",
            str(loras),
            "--max-lora-rank",
            str(rank),
            "--logprobs-mode",
            "processed_logprobs",
        ]
        if max_len is not None:
            cmd += ["--max-model-len", str(max_len)]
        parser = self._tool_call_parser
        if parser is None:
            parser = tool_call_parser_for(self.model_path)
        if parser:
            cmd += ["--enable-auto-tool-choice", "--tool-call-parser", parser]
        return cmd + self._extra_args

    async def _launch(self) -> None:
        if self.model_path is None:
            return  # attach mode
        port = _free_port(self._host)
        self._base_url = f"http://{self._host}:{port}"
        env = {**os.environ, "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "1"}
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        # Unbuffered: the log file shows what the server did when it is read (errors, tests).
        env.setdefault("PYTHONUNBUFFERED", "1")
        if self._log_file is None:
            self._log_file = Path(f"/tmp/osmosis-vllm-{port}.log")
        cmd = self._launch_command(port)
        logger.info("starting vLLM: %s (log: %s)", " ".join(cmd), self._log_file)
        self._proc = await asyncio.to_thread(self._spawn, cmd, env, self._log_file)
        deadline = time.monotonic() + self._startup_timeout_s
        async with httpx.AsyncClient(timeout=5) as client:
            while time.monotonic() < deadline:
                if self._proc.poll() is not None:
                    raise EngineError(
                        f"the vLLM server exited with code {self._proc.returncode} while "
                        f"starting; log tail:\n{_tail(self._log_file)}",
                        status_code=503,
                        code="engine_unavailable",
                    )
                try:
                    if (await client.get(f"{self._base_url}/health")).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.5)
        await self.close()
        raise EngineError(
            f"the vLLM server did not become ready in {self._startup_timeout_s:.0f} s; "
            f"log tail:\n{_tail(self._log_file)}",
            status_code=503,
            code="engine_unavailable",
        )

    @staticmethod
    def _spawn(cmd: list[str], env: dict[str, str], log_file: Path) -> subprocess.Popen[bytes]:
        with log_file.open("wb") as log:
            return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)

    async def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                await asyncio.to_thread(proc.wait, 30)
            except subprocess.TimeoutExpired:
                proc.kill()
                await asyncio.to_thread(proc.wait)
        await super().close()
