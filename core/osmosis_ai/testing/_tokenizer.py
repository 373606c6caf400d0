"""FakeTokenizer: the exactly invertible byte-level tokenizer of the scripted engine."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from osmosis_ai.rollout import Message
from osmosis_ai.serving.toolcalls import render_tool_call, tools_system_block

__all__ = ["FakeTokenizer"]


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
