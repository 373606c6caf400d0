"""FakeEngine: a scripted inference engine in global order, with an invertible tokenizer.

Where :class:`~osmosis_ai.testing.ScriptedEngine` scripts each sample of a rollout (what
rollout tests need), this one serves one script in arrival order and tokenizes exactly
invertibly, which trajectory, gateway and training tests need.

``FakeEngine`` answers from a script (text replies, tool calls, errors or a callable) and
produces *fake but consistent* token data: prompts are rendered with a ChatML template and
encoded with a byte-level tokenizer that is exactly invertible, so multi-turn trajectories
built from its calls merge the way a prefix-stable real model's would. Use it to test rollouts,
graders and the gateway without a model::

    engine = FakeEngine(script=[tool_call("add", a=2, b=3), "The answer is 5."])
    async with PolicyGateway(engine) as gw:
        ...
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from osmosis_ai.rollout import Message
from osmosis_ai.serving import (
    ContextLengthError,
    EngineError,
    FinishReason,
    GenerationRequest,
    GenerationResult,
)
from osmosis_ai.serving.toolcalls import (
    assistant_message,
    render_tool_call,
    tools_system_block,
)
from osmosis_ai.testing._script import FakeReply

__all__ = ["FakeEngine", "FakeTokenizer"]


def _render(item: FakeReply) -> str:
    """The text a model would generate for ``item``: its content, then its tool-call blocks
    in the engines' format (``finish_reason`` is ignored: the engine derives it)."""
    blocks = "".join(
        render_tool_call(name, json.dumps(args, ensure_ascii=False))
        for name, args in item.tool_calls
    )
    return item.content + blocks


ScriptItem = str | FakeReply | BaseException
Script = Sequence[ScriptItem] | Callable[[GenerationRequest], ScriptItem]


class FakeTokenizer:
    """A byte-level tokenizer with three specials; ``decode(encode(s)) == s`` for every string.

    Ids: 0 ``<|endoftext|>``, 1 ``<|im_start|>``, 2 ``<|im_end|>`` (EOS), ``3 + byte`` otherwise.
    """

    specials = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
    eos_id = 2
    vocab_size = 3 + 256

    def encode(self, s: str) -> list[int]:
        ids: list[int] = []
        i = 0
        while i < len(s):
            for sid, sp in enumerate(self.specials):
                if s.startswith(sp, i):
                    ids.append(sid)
                    i += len(sp)
                    break
            else:
                j = s.find("<|", i + 1)
                chunk = s[i : j if j != -1 else len(s)]
                ids.extend(3 + b for b in chunk.encode())
                i += len(chunk)
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        out: list[str] = []
        buf = bytearray()
        for t in ids:
            if t < 3:
                out.append(buf.decode(errors="replace"))
                buf.clear()
                out.append(self.specials[t])
            else:
                buf.append(t - 3)
        out.append(buf.decode(errors="replace"))
        return "".join(out)

    def render(self, messages: list[Message], tools: list[dict[str, Any]] | None) -> str:
        """ChatML, prefix-stable: history renders exactly as it was generated."""
        parts: list[str] = []
        msgs = list(messages)
        system = ""
        if msgs and msgs[0].get("role") == "system":
            system = _text_of(msgs.pop(0).get("content"))
        if tools:
            system = (system + "\n\n" if system else "") + tools_system_block(tools)
        if system:
            parts.append(f"<|im_start|>system\n{system}<|im_end|>\n")
        for m in msgs:
            body = _text_of(m.get("content"))
            for tc in m.get("tool_calls") or []:
                fn = tc.get("function", {})
                body += render_tool_call(str(fn.get("name")), str(fn.get("arguments", "{}")))
            parts.append(f"<|im_start|>{m.get('role')}\n{body}<|im_end|>\n")
        parts.append("<|im_start|>assistant\n")
        return "".join(parts)


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content)


def _fake_logprob(token_id: int, position: int) -> float:
    """A deterministic, token-dependent negative number (distinct per position)."""
    return -0.01 - ((token_id * 2654435761 + position * 40503) % 1000) / 500.0


@dataclass
class FakeEngine:
    """A scripted :class:`~osmosis_trainer.engines.InferenceEngine` for tests.

    Args:
        script: replies served in order (``str``, :class:`FakeReply`, or an exception to
            raise), or a callable ``(request) -> reply`` called for every request.
        delay_s: simulated generation time per request.
        cycle: restart the script when it runs out instead of failing.
        context_window: prompts longer than this (in fake tokens) raise ContextLengthError.
    """

    script: Script = field(default_factory=list)
    delay_s: float = 0.0
    cycle: bool = False
    context_window: int = 1_000_000
    name: str = "fake"
    provides_token_ids: bool = True
    requests: list[GenerationRequest] = field(default_factory=list)
    adapters: list[tuple[str, int]] = field(default_factory=list)
    tokenizer: FakeTokenizer = field(default_factory=FakeTokenizer)
    closed: bool = False
    _version: int = 0
    _next: int = 0

    @property
    def policy_version(self) -> int:
        return self._version

    def _next_item(self, req: GenerationRequest) -> ScriptItem:
        if callable(self.script):
            return self.script(req)
        if self._next >= len(self.script):
            if not self.cycle or not self.script:
                raise EngineError(
                    f"FakeEngine script exhausted after {self._next} replies; add more replies "
                    "or pass cycle=True",
                    status_code=503,
                    code="script_exhausted",
                )
            self._next = 0
        item = self.script[self._next]
        self._next += 1
        return item

    async def generate(self, req: GenerationRequest) -> GenerationResult:
        if self.closed:
            raise EngineError("FakeEngine is closed", status_code=503)
        self.requests.append(req)
        item = self._next_item(req)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if isinstance(item, BaseException):
            raise item
        tok = self.tokenizer
        tools = None if req.tool_choice == "none" else req.tools
        prompt_ids = tok.encode(tok.render(req.messages, tools))
        if len(prompt_ids) > self.context_window:
            raise ContextLengthError(
                f"prompt has {len(prompt_ids)} tokens; the context window is {self.context_window}"
            )
        generated = item if isinstance(item, str) else _render(item)
        ids = tok.encode(generated) + [tok.eos_id]
        finish: FinishReason = "stop"
        if req.max_tokens is not None and len(ids) > req.max_tokens:
            ids, finish = ids[: req.max_tokens], "length"
        out_text = tok.decode([t for t in ids if t != tok.eos_id])
        message, calls = assistant_message(out_text, parse_tools=bool(tools))
        if calls and finish == "stop":
            finish = "tool_calls"
        return GenerationResult(
            message=message,
            text=out_text,
            finish_reason=finish,
            tool_calls=calls,
            prompt_token_ids=prompt_ids,
            completion_token_ids=ids,
            logprobs=[_fake_logprob(t, i) for i, t in enumerate(ids)],
            model=f"{self.name}-v{self._version}",
            policy_version=self._version,
            prompt_tokens=len(prompt_ids),
            completion_tokens=len(ids),
        )

    async def load_adapter(self, path: str, version: int) -> None:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        self.adapters.append((path, version))
        self._version = version

    async def close(self) -> None:
        self.closed = True
