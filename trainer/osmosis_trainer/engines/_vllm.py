"""VLLMEngine: a vLLM OpenAI server, launched here or attached by URL, with runtime LoRA."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from osmosis_trainer.engines._openai_reply import result_from_openai
from osmosis_trainer.engines._types import EngineError, GenerationRequest, GenerationResult

__all__ = ["VLLMEngine"]

logger = logging.getLogger("osmosis")


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _tail(path: Path | None, n: int = 2000) -> str:
    if path is None or not path.exists():
        return ""
    return path.read_text(errors="replace")[-n:]


class VLLMEngine:
    """Generate through a vLLM OpenAI-compatible server.

    Attach with ``VLLMEngine(base_url="http://host:8000")``, or launch one with
    ``VLLMEngine(model_path="folder")``: the server runs as a child process
    (``python -m vllm.entrypoints.openai.api_server``, LoRA enabled, runtime adapter loading
    on, ``--logprobs-mode processed_logprobs``) until :meth:`close`.

    Every request asks for ``return_token_ids`` and logprobs; a server that sends no token
    ids yields calls without token data (recorded, not trainable). Tools are sent so the
    template renders them, but ``tool_choice`` is not (vLLM answers 400 to ``"auto"`` without
    a tool parser); ``<tool_call>`` blocks are parsed from the text here.

    Each adapter version is loaded under a fresh name ``policy-v{N}`` (re-using a name can
    serve stale prefix-cache blocks, vllm-project/vllm#42125) and the previous one is unloaded
    once no request of this engine uses it.

    Args:
        base_url: the server to attach to (with or without a trailing ``/v1``).
        model: the served base model name (attach mode: discovered from ``/v1/models``).
        model_path: launch mode: the model folder to serve.
        python: the interpreter that has vLLM (launch mode; default: this one).
        extra_args: more server arguments (launch mode).
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
        self.name = "vllm"
        self.provides_token_ids = True
        self.model_path = Path(model_path) if model_path is not None else None
        self._base_model = model or (self.model_path.name if self.model_path else None)
        self._python = python or sys.executable
        self._extra_args = list(extra_args or [])
        self._server_opts = (max_lora_rank, max_loras, max_model_len, dtype)
        self._host = host
        self._startup_timeout_s = startup_timeout_s
        self._timeout = request_timeout_s
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._log_file = Path(log_file) if log_file else None
        self._proc: subprocess.Popen[bytes] | None = None
        self._base_url = base_url.rstrip("/").removesuffix("/v1") if base_url else None
        self._served: str | None = None  # adapter name, or None for the base model
        self._version = 0
        self._in_flight: Counter[str] = Counter()
        self._start_lock = asyncio.Lock()
        self._plain_openai = False
        self._started = False

    @property
    def policy_version(self) -> int:
        return self._version

    @property
    def base_url(self) -> str:
        if self._base_url is None:
            raise RuntimeError("the vLLM server has not been started yet")
        return self._base_url

    # -- server lifecycle ------------------------------------------------------------------

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
        return cmd + self._extra_args

    async def start(self) -> None:
        """Launch (launch mode) and wait until the server answers; idempotent."""
        async with self._start_lock:
            if self._started:
                return
            if self.model_path is not None:
                await self._launch()
            if self._base_model is None:
                self._base_model = await self._discover_model()
            self._started = True

    async def _launch(self) -> None:
        port = _free_port(self._host)
        self._base_url = f"http://{self._host}:{port}"
        env = {**os.environ, "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "1"}
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
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

    async def _discover_model(self) -> str:
        data = await self._request("GET", "/v1/models")
        models = [m.get("id") for m in data.get("data", []) if m.get("id")]
        if not models:
            raise EngineError(f"{self.base_url}/v1/models lists no model", status_code=503)
        return str(models[0])

    async def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                await asyncio.to_thread(proc.wait, 30)
            except subprocess.TimeoutExpired:
                proc.kill()
                await asyncio.to_thread(proc.wait)
        self._started = False

    # -- HTTP --------------------------------------------------------------------------------

    async def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        url = f"{self.base_url}{path}"
        try:
            async with httpx.AsyncClient(timeout=self._timeout, headers=self._headers) as client:
                resp = await client.request(method, url, json=body)
        except httpx.TransportError as exc:
            raise EngineError(
                f"the vLLM server at {self.base_url} is unreachable: {exc!r}",
                status_code=503,
                code="engine_unavailable",
            ) from exc
        if resp.status_code >= 400:
            status = 400 if resp.status_code in (400, 422) else 502
            raise EngineError(
                f"vLLM answered HTTP {resp.status_code} to {method} {path}: {resp.text[:500]}",
                status_code=status,
                code="upstream_error",
            )
        try:
            return resp.json() if resp.content else {}
        except ValueError:  # the LoRA routes answer plain text
            return {"text": resp.text}

    # -- InferenceEngine ---------------------------------------------------------------------

    async def generate(self, req: GenerationRequest) -> GenerationResult:
        await self.start()
        served = self._served or str(self._base_model)
        tools = None if req.tool_choice == "none" else req.tools
        body: dict[str, Any] = {
            "model": served,
            "messages": req.messages,
            "temperature": req.temperature,
            "top_p": req.top_p,
        }
        if not self._plain_openai:
            body.update(logprobs=True, top_logprobs=0, return_token_ids=True)
        for key in ("max_tokens", "stop", "seed"):
            if (value := getattr(req, key)) is not None:
                body[key] = value
        if tools:
            body["tools"] = tools
        self._in_flight[served] += 1
        try:
            try:
                data = await self._request("POST", "/v1/chat/completions", body)
            except EngineError as exc:
                if self._plain_openai or exc.status_code != 400 or "token_ids" not in str(exc):
                    raise
                # Not vLLM: a server that refuses the token fields. Serve without them
                # (calls are then recorded as not trainable).
                logger.warning(
                    "%s refuses return_token_ids; its calls are not trainable", self.base_url
                )
                self._plain_openai = True
                for key in ("logprobs", "top_logprobs", "return_token_ids"):
                    body.pop(key)
                data = await self._request("POST", "/v1/chat/completions", body)
        finally:
            self._in_flight[served] -= 1
        result = result_from_openai(
            data, parse_tools=bool(tools), model=served, policy_version=self._version
        )
        if result.completion_token_ids is None:
            self.provides_token_ids = False
        return result

    async def load_adapter(self, path: str, version: int) -> None:
        await self.start()
        name = f"policy-v{version}"
        folder = await asyncio.to_thread(os.path.abspath, path)
        await self._request(
            "POST", "/v1/load_lora_adapter", {"lora_name": name, "lora_path": folder}
        )
        old, self._served, self._version = self._served, name, version
        if old is not None and old != name:
            await self._unload_when_idle(old)

    async def _unload_when_idle(self, name: str, timeout_s: float = 600.0) -> None:
        deadline = time.monotonic() + timeout_s
        # Polling, not an Event: requests may run on other event loops than this one.
        while self._in_flight[name] > 0 and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        try:
            await self._request("POST", "/v1/unload_lora_adapter", {"lora_name": name})
        except EngineError as exc:
            logger.warning("could not unload adapter %s: %s", name, exc)
        self._in_flight.pop(name, None)
