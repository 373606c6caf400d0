"""Demonstrations: the conversations a ``[warm_start]`` trains on, read and checked without torch.

One JSONL line per conversation::

    {"messages": [{"role": "user", "content": "What is 2 + 3?"},
                  {"role": "assistant", "content": null, "tool_calls": [{"id": "c1",
                   "type": "function", "function": {"name": "add", "arguments": "{\\"a\\": 2, \\"b\\": 3}"}}]},
                  {"role": "tool", "tool_call_id": "c1", "content": "5"},
                  {"role": "assistant", "content": "5"}],
     "tools": [{"type": "function", "function": {"name": "add", "parameters": {...}}}],
     "reward": 1.0, "source": "eval:calc-1/3/0"}

Every problem names the file, the line and the fix. :func:`load_demonstrations` returns the good
rows and the problems; the caller decides whether a problem stops it (``on_bad_row``).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from os import PathLike
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from osmosis_ai.chat import ChatToolCall, Message
from osmosis_ai.data._row import DatasetIssue, DatasetRowError
from osmosis_ai.errors import DatasetError, UnreadableFileError
from osmosis_ai.safe_io import open_file

__all__ = [
    "Demonstration",
    "DemonstrationReport",
    "load_demonstrations",
    "looks_like_demonstrations",
    "validate_demonstrations",
]

ROLES = ("system", "user", "assistant", "tool")
_MAX_LINE_CHARS = 4_000_000


class Demonstration(BaseModel):
    """One conversation to imitate, normalised (arguments as JSON strings, content as text or
    content parts, ``None`` only for an assistant turn that calls tools)."""

    model_config = ConfigDict(extra="forbid")

    messages: list[Message]
    tools: list[dict[str, Any]] | None = None
    reward: float | None = None
    source: str | None = None
    line: int
    """1-based line of the row in its file."""

    @property
    def assistant_turns(self) -> int:
        return sum(1 for m in self.messages if m.get("role") == "assistant")


class DemonstrationReport(BaseModel):
    """What :func:`validate_demonstrations` found (JSON-able)."""

    path: str
    rows: int = Field(description="Non-blank lines read.")
    valid_rows: int
    assistant_turns: int = Field(description="Assistant turns in the valid rows (trained on).")
    tool_calls: int = Field(description="Tool calls in the valid rows.")
    error_count: int
    errors: list[DatasetIssue]
    problem_counts: dict[str, int] = Field(default_factory=dict)
    """How many rows had each kind of problem (``unknown_role``, ``orphan_tool``...)."""

    @property
    def ok(self) -> bool:
        return self.error_count == 0 and self.valid_rows > 0

    def lines(self) -> list[str]:
        state = "ok" if self.ok else f"{self.error_count} error(s)"
        out = [
            f"{self.path}: {self.rows} demonstrations ({self.valid_rows} valid, "
            f"{self.assistant_turns} assistant turns, {self.tool_calls} tool calls), {state}",
            *(f"  {e}" for e in self.errors),
        ]
        hidden = self.error_count - len(self.errors)
        if hidden > 0:
            out.append(f"  ... and {hidden} more error(s)")
        return out


class _Bad(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


def _text(content: Any, where: str, *, allow_none: bool = False) -> Any:
    """Content as given, when it is text or a list of text parts."""
    if content is None and allow_none:
        return None
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(p, dict) and isinstance(p.get("text"), str) for p in content
    ):
        return [{"type": "text", "text": p["text"]} for p in content]
    raise _Bad(
        "bad_content",
        f'{where}: content must be a string or a list of {{"type": "text", "text": ...}} '
        f"parts, got {type(content).__name__}",
    )


def _arguments(value: Any, where: str) -> str:
    """Arguments as a JSON-object string (a dict is accepted and serialised)."""
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False)
    if not isinstance(value, str):
        raise _Bad(
            "bad_arguments", f"{where}: arguments must be a JSON string, got {type(value).__name__}"
        )
    try:
        parsed = json.loads(value)
    except ValueError as exc:  # JSONDecodeError, or an integer over Python's digit limit
        detail = (
            f"{exc.msg} at char {exc.pos}" if isinstance(exc, json.JSONDecodeError) else str(exc)
        )
        raise _Bad(
            "bad_arguments",
            f"{where}: arguments are not JSON ({detail}): write them as a "
            'JSON object in a string, e.g. "{\\"a\\": 2}"',
        ) from None
    if not isinstance(parsed, dict):
        raise _Bad(
            "bad_arguments",
            f"{where}: arguments must be a JSON object, got {type(parsed).__name__}",
        )
    return value


def _tool_calls(calls: Any, where: str) -> list[ChatToolCall]:
    if not isinstance(calls, list) or not calls:
        raise _Bad("bad_tool_call", f"{where}: tool_calls must be a non-empty list")
    out: list[ChatToolCall] = []
    for j, call in enumerate(calls):
        at = f"{where}.tool_calls[{j}]"
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise _Bad(
                "bad_tool_call",
                f'{at}: expected {{"id": ..., "type": "function", "function": '
                '{"name": ..., "arguments": "{...}"}}',
            )
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id:
            raise _Bad(
                "bad_tool_call", f"{at}: missing 'id' (the tool message answers it by tool_call_id)"
            )
        args = _arguments(fn.get("arguments", "{}"), f"{at}.function")
        out.append(
            {"id": call_id, "type": "function", "function": {"name": fn["name"], "arguments": args}}
        )
    return out


def _message(m: Any, i: int, open_calls: dict[str, str]) -> Message:
    """One checked message; ``open_calls`` holds the calls of the last assistant turn not yet
    answered (id -> name)."""
    where = f"messages[{i}]"
    if not isinstance(m, dict):
        raise _Bad("bad_message", f"{where}: expected an object, got {type(m).__name__}")
    role = m.get("role")
    if role not in ROLES:
        raise _Bad(
            "unknown_role",
            f"{where}: unknown role {role!r}; use one of {', '.join(ROLES)}",
        )
    if role == "assistant":
        open_calls.clear()
        msg: Message = {
            "role": "assistant",
            "content": _text(m.get("content"), where, allow_none=True),
        }
        if m.get("tool_calls"):
            calls = _tool_calls(m["tool_calls"], where)
            msg["tool_calls"] = calls
            open_calls.update({str(c["id"]): c["function"]["name"] for c in calls})
        elif not msg["content"]:
            raise _Bad(
                "empty_assistant",
                f"{where}: an assistant message needs content or tool_calls; drop the message "
                "or fill it",
            )
        return msg
    if role == "tool":
        call_id = m.get("tool_call_id")
        if call_id not in open_calls:
            raise _Bad(
                "orphan_tool",
                f"{where}: tool result for tool_call_id {call_id!r} follows no assistant call "
                f"with that id (open calls: {', '.join(open_calls) or 'none'}); put it after "
                "the assistant message whose tool_calls has that id",
            )
        open_calls.pop(call_id)
        tool: Message = {
            "role": "tool", "tool_call_id": call_id, "content": _text(m.get("content"), where)
        }
        if isinstance(m.get("name"), str):  # kept only when given: templates may render it
            tool["name"] = m["name"]
        return tool
    open_calls.clear()
    return {"role": role, "content": _text(m.get("content"), where)}


def _tools(tools: Any) -> list[dict[str, Any]] | None:
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise _Bad("bad_tools", f"tools must be a list of tool specs, got {type(tools).__name__}")
    for j, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise _Bad(
                "bad_tools",
                f'tools[{j}]: expected {{"type": "function", "function": {{"name": ..., '
                '"description": ..., "parameters": {...}}}}',
            )
    return tools or None


def parse_demonstration(record: Any, line: int) -> Demonstration:
    """Check one decoded row (raises ``_Bad`` with the problem)."""
    if not isinstance(record, dict):
        raise _Bad("bad_row", f"expected a JSON object, got {type(record).__name__}")
    messages = record.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _Bad("bad_row", "missing 'messages' (a non-empty list of chat messages)")
    open_calls: dict[str, str] = {}
    checked = [_message(m, i, open_calls) for i, m in enumerate(messages)]
    if not any(m["role"] == "assistant" for m in checked):
        raise _Bad(
            "no_assistant",
            "no assistant message: nothing to learn from; add the assistant's replies",
        )
    reward = record.get("reward")
    if reward is not None and (
        isinstance(reward, bool) or not isinstance(reward, int | float) or not math.isfinite(reward)
    ):
        raise _Bad("bad_row", f"reward must be a number, got {reward!r}")
    source = record.get("source")
    return Demonstration(
        messages=checked,
        tools=_tools(record.get("tools")),
        reward=None if reward is None else float(reward),
        source=source if isinstance(source, str) else None,
        line=line,
    )


def _scan(path: Path, label: str) -> Any:
    """(line number, Demonstration or DatasetIssue with its kind) for each non-blank line."""
    try:
        handle = open_file(path, "r", follow=True)
    except UnreadableFileError as exc:
        raise DatasetError(f"{label}: cannot read: {exc.reason}") from None
    with handle:
        number = 0
        while True:
            try:
                text = handle.readline(_MAX_LINE_CHARS + 1)
                if len(text) > _MAX_LINE_CHARS and not text.endswith("\n"):
                    while (rest := handle.readline(_MAX_LINE_CHARS)) and not rest.endswith("\n"):
                        pass  # the rest of an over-long line, in bounded reads
            except UnicodeDecodeError:
                yield (
                    number + 1,
                    "encoding",
                    DatasetIssue(
                        file=label,
                        line=number + 1,
                        message="not UTF-8 text; save the file as UTF-8",
                    ),
                )
                return
            if not text:
                return
            number += 1
            if not text.strip():
                continue
            if len(text) > _MAX_LINE_CHARS:
                yield (
                    number,
                    "bad_json",
                    DatasetIssue(
                        file=label, line=number, message=f"line longer than {_MAX_LINE_CHARS} chars"
                    ),
                )
                continue
            try:
                record = json.loads(text)
            except json.JSONDecodeError as exc:
                yield (
                    number,
                    "bad_json",
                    DatasetIssue(
                        file=label,
                        line=number,
                        char=exc.colno,
                        message=f"not JSON ({exc.msg}); each line must be one JSON object",
                    ),
                )
                continue
            except RecursionError:
                yield (
                    number,
                    "bad_json",
                    DatasetIssue(file=label, line=number, message="JSON nested too deeply"),
                )
                continue
            except ValueError as exc:  # an integer over Python's digit limit
                yield (
                    number,
                    "bad_json",
                    DatasetIssue(file=label, line=number, message=f"unreadable JSON value: {exc}"),
                )
                continue
            try:
                yield number, "", parse_demonstration(record, number)
            except _Bad as bad:
                yield (
                    number,
                    bad.kind,
                    DatasetIssue(file=label, line=number, row=None, message=bad.message),
                )


def _check(path: str | PathLike[str]) -> tuple[Path, str]:
    p = Path(path)
    label = str(path)
    try:
        open_file(p, "rb", follow=True).close()
    except UnreadableFileError as exc:
        if exc.missing:
            raise DatasetError(f"{label}: demonstrations file not found") from None
        raise DatasetError(f"{label}: {exc.reason}") from None
    return p, label


def load_demonstrations(
    path: str | PathLike[str], *, on_bad_row: str = "skip"
) -> tuple[list[Demonstration], list[DatasetIssue]]:
    """Read a demonstrations JSONL file: the valid rows and every problem found.

    Args:
        path: the ``.jsonl`` file.
        on_bad_row: ``"skip"`` returns the problems beside the good rows; ``"error"`` raises
            at the first one.

    Raises:
        DatasetError: the file is missing or unreadable.
        DatasetRowError: with ``on_bad_row="error"``, the first bad row (``file:line: what;
            fix``).
    """
    p, label = _check(path)
    rows: list[Demonstration] = []
    problems: list[DatasetIssue] = []
    for _, _kind, item in _scan(p, label):
        if isinstance(item, DatasetIssue):
            if on_bad_row == "error":
                raise DatasetRowError(item)
            problems.append(item)
        else:
            rows.append(item)
    return rows, problems


def validate_demonstrations(
    path: str | PathLike[str], *, max_errors: int = 5
) -> DemonstrationReport:
    """Read every row of a demonstrations file and report the problems (the first
    ``max_errors`` listed, all counted by kind)."""
    p, label = _check(path)
    errors: list[DatasetIssue] = []
    kinds: Counter[str] = Counter()
    rows = valid = turns = calls = 0
    for _, kind, item in _scan(p, label):
        rows += 1
        if isinstance(item, DatasetIssue):
            kinds[kind] += 1
            if len(errors) < max_errors:
                errors.append(item)
            continue
        valid += 1
        turns += item.assistant_turns
        calls += sum(len(m.get("tool_calls") or []) for m in item.messages)
    if rows == 0:
        kinds["empty"] += 1
        errors.append(DatasetIssue(file=label, message="the file has no demonstrations"))
    return DemonstrationReport(
        path=label,
        rows=rows,
        valid_rows=valid,
        assistant_turns=turns,
        tool_calls=calls,
        error_count=sum(kinds.values()),
        errors=errors,
        problem_counts=dict(kinds),
    )


def looks_like_demonstrations(path: str | PathLike[str]) -> bool:
    """Whether a JSONL file's first non-blank line is an object with ``messages`` (so
    ``dataset validate`` checks it as demonstrations rather than prompt rows)."""
    p = Path(path)
    if p.suffix.lower() != ".jsonl":
        return False
    try:
        with open_file(p, "r", follow=True) as handle:
            while text := handle.readline(_MAX_LINE_CHARS + 1):
                if text.strip():
                    record = json.loads(text)
                    return isinstance(record, dict) and "messages" in record
    except (OSError, ValueError, RecursionError):  # ValueError: bad JSON, huge ints
        return False
    return False
