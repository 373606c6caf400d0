"""VLLMEngine: a vLLM OpenAI server launched as a child process, with runtime LoRA.

Prompts are rendered here, by the same :class:`ChatRenderer` as the transformers engine, and
sent to vLLM as token ids (``POST /v1/completions``): the server's own chat template would
leave out what the renderer adds (the tools block of a template that ignores ``tools``, tool
calls as the family writes them), so a policy served by vLLM would see other prompts than it
was trained on. Replies are decoded and parsed by the same code as well (:func:`reply_text`,
:class:`ResponseParser`).
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any, NotRequired, TypedDict

import httpx

from osmosis_ai.serving import (
    ContextLengthError,
    EngineError,
    FinishReason,
    GenerationRequest,
    GenerationResult,
    OpenAIServerEngine,
    new_api_key,
)
from osmosis_ai.serving.toolcalls import assistant_message
from osmosis_trainer.engines._chat_template import ChatRenderer
from osmosis_trainer.engines._response import ResponseParser, reply_text

__all__ = ["VLLMEngine"]

logger = logging.getLogger("osmosis")

_SERVERS: set[subprocess.Popen[bytes]] = set()
"""Launched vLLM servers not yet closed. A child outlives its parent: one left running after
the script that launched it ends holds its port and the GPU's memory."""


@atexit.register
def _end_servers_at_exit() -> None:
    for proc in list(_SERVERS):
        _end_server(proc)


def _end_server(proc: subprocess.Popen[bytes]) -> None:
    """Stop a launched server: SIGTERM, then SIGKILL if it is still there after 30 s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    _SERVERS.discard(proc)


class CompletionBody(TypedDict):
    """A ``POST /v1/completions`` body: the prompt as token ids, and vLLM's extensions that
    return the completion's ids and keep its special tokens in the text."""

    model: str
    prompt: list[int]
    temperature: float
    top_p: float
    logprobs: int
    return_token_ids: bool
    skip_special_tokens: bool
    max_tokens: NotRequired[int]
    stop: NotRequired[list[str]]
    seed: NotRequired[int]


def open_private_log(path: Path) -> IO[bytes]:
    """``path`` opened for writing from the start, readable by its owner only (0600): never
    through a symbolic link (a planted ``log -> ~/.bashrc`` is refused, not truncated), and an
    existing file's wider mode is narrowed. A server's log can quote prompts and keys' errors."""
    fd = os.open(
        path,
        os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0) | os.O_CLOEXEC,
        0o600,
    )
    try:
        os.fchmod(fd, 0o600)
        return os.fdopen(fd, "wb")
    except BaseException:
        os.close(fd)
        raise


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _tail(path: Path | None, n: int = 2000) -> str:
    if path is None or not path.exists():
        return ""
    return path.read_text(errors="replace")[-n:]


class VLLMEngine(OpenAIServerEngine):
    """Generate through a vLLM OpenAI-compatible server, launched here or attached by URL.

    Launch one with ``VLLMEngine(model_path="folder")``: the server runs as a child process
    (``python -m vllm.entrypoints.openai.api_server``, LoRA enabled, runtime adapter loading
    on, ``--logprobs-mode processed_logprobs``, a fresh API key) until :meth:`close`. Or
    attach with ``VLLMEngine(base_url="http://host:8000", tokenizer="folder")``. With a
    tokenizer (always when launched) prompts are rendered here and sent as token ids, exactly
    as the transformers engine renders them (see the module docstring); attached without one,
    the server's chat template renders them (as :class:`~osmosis_ai.serving.OpenAIServerEngine`).

    Args:
        base_url: the server to attach to (with or without a trailing ``/v1``).
        model: the served base model name (attach mode: discovered from ``/v1/models``).
        model_path: launch mode: the model folder to serve.
        tokenizer: the folder (or Hub id) of the served model's tokenizer and chat template
            (default: ``model_path``).
        python: the interpreter that has vLLM (launch mode; default: this one).
        extra_args: more server arguments (launch mode).
        max_lora_rank, max_loras, max_model_len, dtype: server settings (launch mode).
        host: the interface a launched server binds (loopback by default).
        startup_timeout_s: how long to wait for a launched server to become ready.
        request_timeout_s: per-request timeout.
        api_key: sent as a bearer token; a launched server requires it (default: a fresh
            random key, handed to the child in ``VLLM_API_KEY``, never on its command line).
        log_file: where a launched server's output goes (mode 0600, never through a link;
            default: ``vllm.log`` in a fresh private temporary folder, not a predictable name).
    """

    def __init__(
        self,
        base_url: str | None = None,
        *,
        model: str | None = None,
        model_path: str | Path | None = None,
        tokenizer: str | Path | None = None,
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
        self.model_path = Path(model_path) if model_path is not None else None
        if self.model_path is not None and api_key is None:
            api_key = new_api_key()
        super().__init__(
            base_url,
            model=model or (self.model_path.name if self.model_path else None),
            request_timeout_s=request_timeout_s,
            api_key=api_key,
        )
        self._server_key = api_key
        self._python = python or sys.executable
        self._extra_args = list(extra_args or [])
        self._server_opts = (max_lora_rank, max_loras, max_model_len, dtype)
        self._max_model_len = max_model_len
        self._host = host
        self._startup_timeout_s = startup_timeout_s
        self._log_file = Path(log_file) if log_file else None
        self._proc: subprocess.Popen[bytes] | None = None
        self._tokenizer_source = tokenizer if tokenizer is not None else self.model_path
        self.renderer: ChatRenderer | None = None
        self._parser: ResponseParser | None = None
        self._context_read = False

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

    def _load_renderer(self) -> None:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(self._tokenizer_source))
        self.renderer = ChatRenderer(tokenizer)
        self._parser = ResponseParser(tokenizer)

    async def _launch(self) -> None:
        if self._tokenizer_source is not None and self.renderer is None:
            await asyncio.to_thread(self._load_renderer)
        if self.model_path is None:
            return  # attach mode
        port = _free_port(self._host)
        self._base_url = f"http://{self._host}:{port}"
        env = {**os.environ, "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "1"}
        # The key through the environment: a command line is visible to every local user (ps)
        # and is logged below. vLLM then requires it on every /v1 route, LoRA loading included.
        if self._server_key:
            env["VLLM_API_KEY"] = self._server_key
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        # Unbuffered: the log file shows what the server did when it is read (errors, tests).
        env.setdefault("PYTHONUNBUFFERED", "1")
        if self._log_file is None:
            import tempfile

            self._log_file = Path(tempfile.mkdtemp(prefix="osmosis-vllm-")) / "vllm.log"
        cmd = self._launch_command(port)
        logger.info("starting vLLM: %s (log: %s)", " ".join(cmd), self._log_file)
        self._proc = await asyncio.to_thread(self._spawn, cmd, env, self._log_file)
        _SERVERS.add(self._proc)
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
        with open_private_log(log_file) as log:
            return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)

    async def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            await asyncio.to_thread(_end_server, proc)
        await super().close()

    # -- prompts rendered here, sent as token ids ----------------------------------------------

    async def start(self) -> None:
        """Launch or attach (see the base class); then learn the server's context window,
        which bounds ``max_tokens`` (vLLM's completions default to 16 new tokens)."""
        await super().start()
        if self.renderer is not None and not self._context_read:
            self._context_read = True
            if self._max_model_len is None:
                data = await self._request("GET", "/v1/models")
                for card in data.get("data", []):
                    if card.get("id") == self._base_model and isinstance(
                        card.get("max_model_len"), int
                    ):
                        self._max_model_len = int(card["max_model_len"])

    @property
    def context_window(self) -> int | None:
        """The server's ``max_model_len`` once known (``None`` before ``start``): the policy
        gateway caps a request's ``max_tokens`` at it and says so once."""
        return self._max_model_len

    async def generate(self, req: GenerationRequest) -> GenerationResult:
        await self.start()
        renderer = self.renderer
        if renderer is None:
            return await super().generate(req)  # attached without a tokenizer: server renders
        tools = None if req.tool_choice == "none" else req.tools
        prompt = renderer.encode(req.messages, tools)
        body = self.completion_body(req, prompt)
        served = str(body["model"])
        self._in_flight[served] += 1
        try:
            data = await self._request("POST", "/v1/completions", body)
        finally:
            self._in_flight[served] -= 1
        return self._result(data, prompt, req, parse_tools=bool(tools), served=served)

    def completion_body(self, req: GenerationRequest, prompt: list[int]) -> CompletionBody:
        """The ``/v1/completions`` body for ``req`` whose rendered prompt is ``prompt``."""
        max_tokens = req.max_tokens
        if self._max_model_len is not None:
            room = self._max_model_len - len(prompt)
            if room < 1:
                raise ContextLengthError(
                    f"the prompt has {len(prompt)} tokens; the vLLM server's context window is "
                    f"{self._max_model_len}. Shorten the conversation."
                )
            # vLLM's completions default to 16 new tokens; the chat route's is the context.
            max_tokens = min(max_tokens or room, room)
        body: CompletionBody = {
            "model": self._served or str(self._base_model),
            "prompt": prompt,
            "temperature": req.temperature,
            "top_p": req.top_p,
            "logprobs": 0,
            "return_token_ids": True,
            "skip_special_tokens": False,
        }
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        if req.stop is not None:
            body["stop"] = req.stop
        if req.seed is not None:
            body["seed"] = req.seed
        return body

    def _result(
        self,
        data: dict[str, Any],  # the server's JSON answer, checked field by field below
        prompt: list[int],
        req: GenerationRequest,
        *,
        parse_tools: bool,
        served: str,
    ) -> GenerationResult:
        assert self.renderer is not None
        tokenizer = self.renderer.tokenizer
        choice = data["choices"][0]
        ids = [int(t) for t in choice.get("token_ids") or []]
        if not ids and choice.get("token_ids") is None:
            raise EngineError(
                f"{self.base_url} returned no token ids (return_token_ids needs vLLM >= 0.10.2)",
                status_code=502,
                code="upstream_error",
            )
        raw_lps = (choice.get("logprobs") or {}).get("token_logprobs")
        logprobs = [float(x) for x in raw_lps] if isinstance(raw_lps, list) else None
        if logprobs is not None and len(logprobs) != len(ids):
            logger.warning(
                "vLLM returned %d token ids but %d logprobs; recording the call without tokens",
                len(ids), len(logprobs),
            )
            logprobs = None
        finish: FinishReason = "length" if choice.get("finish_reason") == "length" else "stop"
        # A stop *string* (stop_reason a str) leaves its tokens in the text, cut below; an end
        # token (EOS: stop_reason None; a stop token id: an int) is the last id, not text.
        stop_reason = choice.get("stop_reason")
        ended_by_token = (
            finish == "stop"
            and not isinstance(stop_reason, str)
            and bool(ids)
            and (ids[-1] in tokenizer.all_special_ids or ids[-1] == stop_reason)
        )
        text = reply_text(tokenizer, ids, ended_by_token=ended_by_token, stop=list(req.stop or []))
        if parse_tools and self._parser is not None:
            message, calls = self._parser(text, prompt)
        else:
            message, calls = assistant_message(text, parse_tools=parse_tools)
        return GenerationResult(
            message=message,
            text=text,
            finish_reason="tool_calls" if calls and finish == "stop" else finish,
            tool_calls=calls,
            prompt_token_ids=prompt,
            completion_token_ids=ids if logprobs is not None else None,
            logprobs=logprobs,
            model=served,
            policy_version=self._version,
            prompt_tokens=len(prompt),
            completion_tokens=len(ids),
        )
