"""A traced sample's conversation as the trace viewer shows it: text, tool calls, tool results.

The trainer keeps each sample's conversation in the gateway's OpenAI wire format, where a
user turn may be a list of content parts (Strands sends ``[{"text": ..., "type": "text"}]``),
an assistant turn carries ``tool_calls`` and a ``tool`` message answers one call by its id.
Here each tool call becomes one block with its name, its arguments, its result and where the
result's tokens sit in the training sequence: masked (context, as they must be) or trained.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["content_text", "sample_view"]


def content_text(content: Any) -> str:
    """A message's content as plain text: a string as is, content parts joined (a part that is
    not text shows as ``[image_url]`` and the like), anything else as JSON."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        content = [content]
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, str):
                out.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                out.append(part["text"])
            elif isinstance(part, dict) and "json" in part:
                out.append(json.dumps(part["json"], ensure_ascii=False))
            elif isinstance(part, dict):
                out.append(f"[{part.get('type') or next(iter(part), 'part')}]")
            else:
                out.append(json.dumps(part, ensure_ascii=False, default=str))
        return "\n".join(out)
    return json.dumps(content, ensure_ascii=False, default=str)


def _arguments(raw: Any) -> Any:
    """Arguments as a JSON value when they parse (the wire carries them as a string)."""
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


class _Locator:
    """Finds texts, in order, in the concatenated token texts of the training sequences."""

    def __init__(self, sequences: list[dict[str, Any]]) -> None:
        self.seqs: list[tuple[str, list[int], list[int]]] = []  # (text, token starts, mask)
        for seq in sequences:
            tokens, mask = seq.get("tokens"), seq.get("mask")
            if not isinstance(tokens, list) or not isinstance(mask, list):
                self.seqs.append(("", [], []))
                continue
            starts, pos = [], 0
            for tok in tokens:
                starts.append(pos)
                pos += len(str(tok))
            self.seqs.append(("".join(str(t) for t in tokens), starts, mask))
        self.cursor = (0, 0)  # (sequence, character)

    def find(self, text: str) -> dict[str, Any] | None:
        """The tokens covering the next occurrence of ``text``: masked and trained counts."""
        needle = text.strip()
        if not needle:
            return None
        seq_i, char = self.cursor
        for i in range(seq_i, len(self.seqs)):
            full, starts, mask = self.seqs[i]
            # A result follows the model's first call: look after its first trained token
            # (the prompt may quote the same text), else anywhere in a later, split sequence.
            first_trained = next(
                (starts[j] for j, m in enumerate(mask[: len(starts)]) if m == 1), 0
            )
            at = full.find(needle, max(char, first_trained) if i == seq_i else first_trained)
            if at < 0 and i != seq_i:
                at = full.find(needle)
            if at < 0:
                continue
            end = at + len(needle)
            first = max(j for j, s in enumerate(starts) if s <= at)
            last = max(j for j, s in enumerate(starts) if s < end)
            self.cursor = (i, end)
            span = mask[first : last + 1]
            trained = sum(1 for m in span if m == 1)
            return {
                "sequence": i,
                "start": first,
                "end": last + 1,
                "masked": len(span) - trained,
                "trained": trained,
            }
        return None


def sample_view(sample: dict[str, Any]) -> dict[str, Any]:
    """``sample`` with ``blocks`` (the conversation as the viewer draws it) and, per training
    sequence, ``tool_spans`` (the token ranges that hold a tool's result)."""
    messages = sample.get("messages")
    sequences = sample.get("sequences")
    sequences = [s for s in sequences if isinstance(s, dict)] if isinstance(sequences, list) else []
    locate = _Locator(sequences)
    blocks: list[dict[str, Any]] = []
    calls: dict[str, dict[str, Any]] = {}
    spans: list[list[dict[str, Any]]] = [[] for _ in sequences]
    for m in messages if isinstance(messages, list) else []:
        if not isinstance(m, dict):
            continue
        role = str(m.get("role") or "?")
        text = content_text(m.get("content"))
        if role == "tool":
            call_id = str(m.get("tool_call_id") or "")
            where = locate.find(text)
            if where is not None:
                spans[where["sequence"]].append(
                    {"start": where["start"], "end": where["end"], "call_id": call_id}
                )
            result = {"text": text, "tokens": where}
            if call_id in calls and calls[call_id]["result"] is None:
                calls[call_id]["result"] = result
            else:  # a result whose call is not in the kept conversation
                blocks.append({"kind": "tool_result", "call_id": call_id, **result})
            continue
        if text or not m.get("tool_calls"):
            blocks.append({"kind": "message", "role": role, "name": m.get("name"), "text": text})
        for call in m.get("tool_calls") or []:
            if not isinstance(call, dict):
                continue
            fn = call.get("function")
            fn = fn if isinstance(fn, dict) else {}
            block: dict[str, Any] = {
                "kind": "tool_call",
                "id": str(call.get("id") or ""),
                "name": str(fn.get("name") or "?"),
                "arguments": _arguments(fn.get("arguments")),
                "result": None,
            }
            calls[block["id"]] = block
            blocks.append(block)
    out = {**sample, "blocks": blocks}
    if sequences:
        out["sequences"] = [{**s, "tool_spans": spans[i]} for i, s in enumerate(sequences)]
    return out
