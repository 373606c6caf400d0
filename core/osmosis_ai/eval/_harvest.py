"""Harvesting demonstrations from traces: the passed rollouts of an eval run or a training run
become warm-start rows (``osmosis dataset from-eval`` / ``from-run``).

It lives in ``eval`` because it reads eval runs' records and store; the demonstrations file
itself (its row shape, reading and checking it for a warm start) is ``osmosis_ai.data``'s.

A row is one conversation in OpenAI chat shape, exactly as the agent sent it to the policy:
the system prompt, the user turns, the assistant's tool calls, the tool results and the final
answer, with the ``tools`` specs of that request, the sample's ``reward`` and a ``source``
naming where it came from. The messages are taken from the gateway's record of the policy
calls (``request_messages`` + ``response_message``), not from the framework's own history,
because that record is what the model actually saw.

Rejection sampling keeps a sample when it succeeded and its reward reaches the threshold (the
eval run's ``pass_threshold``, the training run's ``[evaluation] pass_threshold``, or
``min_reward``). Rows with the same messages and tools are written once. Everything that is
not kept is counted by reason, never silently dropped::

    report = demos_from_eval("calc-20261125-101500", Path("demos.jsonl"))
    print(report.lines())
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from osmosis_ai.chat import ChatToolCall, Message
from osmosis_ai.errors import OsmosisError, UnreadableFileError
from osmosis_ai.eval._records import EvalRecord
from osmosis_ai.safe_io import JsonLines, read_json_object, read_jsonl, read_toml

__all__ = [
    "DemoReport",
    "chat_messages",
    "conversations_from_calls",
    "demos_from_eval",
    "demos_from_run",
]

Progress = Callable[[int, int], None]
"""``on_progress(done, total)``: called after each sample is looked at."""

_MAX_PROBLEMS = 20
_ROLES = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
}


@dataclass
class DemoReport:
    """What a conversion kept and why the rest was left out."""

    source: str
    """The run read (its folder)."""
    output: Path
    min_reward: float
    """The reward a sample needed to be kept."""
    samples: int = 0
    """Samples looked at."""
    kept: int = 0
    """Rows written."""
    below_threshold: int = 0
    failed: int = 0
    """Samples that failed, timed out or were skipped (no reward to judge)."""
    duplicates: int = 0
    """Rows equal (messages and tools) to one already written."""
    unreadable: int = 0
    """Result lines, trace files or conversations that could not be read."""
    without_tools: int = 0
    """Kept rows with tool calls whose trace recorded no tools specs (older traces)."""
    problems: list[str] = field(default_factory=list)
    """Located messages (``file:line: what``) for the unreadable ones, the first 20."""

    def problem(self, message: str) -> None:
        self.unreadable += 1
        if len(self.problems) < _MAX_PROBLEMS:
            self.problems.append(message)

    def lines(self) -> list[str]:
        """The report as the CLI prints it."""
        out = [
            f"{self.kept} rows written to {self.output} from {self.samples} samples of "
            f"{self.source}",
            f"  kept {self.kept} · below reward {self.min_reward:g}: {self.below_threshold} · "
            f"failed {self.failed} · duplicates {self.duplicates} · unreadable {self.unreadable}",
        ]
        if self.without_tools:
            out.append(
                f"  {self.without_tools} kept rows call tools but their traces hold no tools "
                "specs (written by an older osmosis); the warm start renders them without a "
                "tools block"
            )
        out.extend(f"  {p}" for p in self.problems)
        if self.unreadable > len(self.problems):
            out.append(f"  ... and {self.unreadable - len(self.problems)} more unreadable")
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "output": str(self.output),
            "min_reward": self.min_reward,
            "samples": self.samples,
            "kept": self.kept,
            "below_threshold": self.below_threshold,
            "failed": self.failed,
            "duplicates": self.duplicates,
            "unreadable": self.unreadable,
            "without_tools": self.without_tools,
            "problems": list(self.problems),
        }


# --- messages ---------------------------------------------------------------------------


def _text(content: Any) -> str:
    """A ``content`` field as text (a string, or the text of a list of parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            else:
                raise ValueError(f"a content part without text: {json.dumps(part)[:80]}")
        return "".join(parts)
    raise ValueError(f"content must be text or a list of text parts, not {type(content).__name__}")


def _tool_call(call: Any) -> ChatToolCall:
    if not isinstance(call, dict):
        raise ValueError(f"a tool call is not an object: {str(call)[:80]}")
    fn = call["function"] if isinstance(call.get("function"), dict) else call
    name = fn.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"a tool call without a function name: {json.dumps(call)[:120]}")
    args = fn.get("arguments", "{}")
    if not isinstance(args, str):  # some clients send the parsed object
        args = json.dumps(args)
    return {
        "id": str(call.get("id") or ""),
        "type": "function",
        "function": {"name": name, "arguments": args},
    }


def _message(raw: Any) -> Message:
    if not isinstance(raw, dict):
        raise ValueError(f"a message is not an object: {str(raw)[:80]}")
    role = _ROLES.get(str(raw.get("role")))
    if role is None:
        raise ValueError(f"unknown role {raw.get('role')!r}")
    content = raw.get("content")
    if role == "user":
        if isinstance(content, list):
            return {
                "role": role,
                "content": [{"type": "text", "text": _text([p])} for p in content],
            }
        return {"role": role, "content": _text(content)}
    if role == "tool":
        return {
            "role": role,
            "tool_call_id": str(raw.get("tool_call_id") or ""),
            "content": _text(content),
        }
    if role == "system":
        return {"role": role, "content": _text(content)}
    calls = [_tool_call(c) for c in raw.get("tool_calls") or []]
    text = _text(content)
    out: Message = {"role": role, "content": text if text or not calls else None}
    if calls:
        out["tool_calls"] = calls
    return out


def chat_messages(raw: list[Any]) -> list[Message]:
    """Recorded chat messages in the warm-start row shape (see the module docstring).

    ``developer`` becomes ``system``; content parts become text (user turns keep their parts);
    tool-call arguments are JSON strings. Raises ``ValueError`` on an unknown role or content
    that is not text.
    """
    return [_message(m) for m in raw]


def _tools(raw: Any) -> list[dict[str, Any]] | None:
    if not raw:
        return None
    out = []
    for spec in raw:
        fn = spec.get("function") if isinstance(spec, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise ValueError(f"a tools spec without a function name: {json.dumps(spec)[:120]}")
        kept = {k: fn[k] for k in ("name", "description", "parameters") if k in fn}
        out.append({"type": "function", "function": kept})
    return out


def _same(a: Message, b: Message) -> bool:
    """Whether two messages are the same turn (tool-call arguments may be re-serialised)."""
    if a["role"] != b["role"]:
        return False
    if a["role"] == "assistant":
        names = [c["function"]["name"] for c in a.get("tool_calls") or []]
        return names == [c["function"]["name"] for c in b.get("tool_calls") or []]
    return _text(a.get("content")) == _text(b.get("content"))


def _extends(messages: list[Message], following: list[Message]) -> bool:
    """Whether the next request carries the whole conversation so far (request + reply)."""
    return len(following) >= len(messages) and all(
        _same(x, y) for x, y in zip(messages, following, strict=False)
    )


def conversations_from_calls(
    calls: list[dict[str, Any]],
) -> list[tuple[list[Message], list[dict[str, Any]] | None]]:
    """``(messages, tools)`` per conversation in a sample's recorded policy calls.

    Each call's request is the conversation so far; a call whose successor carries its request
    and reply is covered by that successor. Usually one conversation comes out; a framework
    that rewrote its history in between (a summary, a dropped turn) gives one per stretch, so
    no assistant turn is lost. Raises ``ValueError`` on a call that cannot be read.
    """
    convs: list[tuple[list[Message], list[dict[str, Any]] | None]] = []
    for i, call in enumerate(calls):
        if not isinstance(call, dict) or "request_messages" not in call:
            raise ValueError(f"policy call {i} has no request_messages")
        request = chat_messages(list(call["request_messages"]))
        reply = call.get("response_message")
        messages = [*request, _message(reply)] if reply else request
        if reply and i + 1 < len(calls):
            following = chat_messages(list(calls[i + 1].get("request_messages") or []))
            if _extends(messages, following):
                continue
        convs.append((messages, _tools(call.get("tools"))))
    return convs


# --- writing ------------------------------------------------------------------------------


def _dedup_key(messages: list[Message], tools: list[dict[str, Any]] | None) -> str:
    """The row as JSON with tool-call ids replaced by their order: two runs that made the same
    calls with the same results are one demonstration, whatever random ids the engine drew."""
    ids: dict[str, str] = {}
    for m in messages:
        for call in m.get("tool_calls") or []:
            ids.setdefault(str(call.get("id")), f"call_{len(ids)}")
    canonical: list[dict[str, Any]] = []
    for m in messages:
        row: dict[str, Any] = dict(m)
        if m.get("tool_calls"):
            row["tool_calls"] = [{**c, "id": ids[str(c.get("id"))]} for c in m["tool_calls"] or []]
        if "tool_call_id" in m:
            row["tool_call_id"] = ids.get(str(m["tool_call_id"]), m["tool_call_id"])
        canonical.append(row)
    return json.dumps([canonical, tools], sort_keys=True)


class _Writer:
    """Writes rows to a temporary file beside ``output``; moved into place at the end."""

    def __init__(self, output: Path, report: DemoReport) -> None:
        self.output = output
        self.report = report
        self.seen: set[str] = set()
        self.tmp = output.with_name(f".{output.name}.tmp")
        try:
            output.parent.mkdir(parents=True, exist_ok=True)
            self.fh = self.tmp.open("w", encoding="utf-8")
        except OSError as exc:
            raise OsmosisError(f"cannot write {output}: {exc}; choose another -o path") from exc

    def add(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None,
        reward: float,
        source: str,
    ) -> None:
        key = _dedup_key(messages, tools)
        if key in self.seen:
            self.report.duplicates += 1
            return
        self.seen.add(key)
        row: dict[str, Any] = {"messages": messages}
        if tools:
            row["tools"] = tools
        elif any(m.get("tool_calls") for m in messages):
            self.report.without_tools += 1
        row["reward"] = reward
        row["source"] = source
        self.fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        self.report.kept += 1

    def close(self, *, ok: bool) -> None:
        self.fh.close()
        if ok:
            os.replace(self.tmp, self.output)
        else:
            self.tmp.unlink(missing_ok=True)


def _write(output: Path, report: DemoReport, fill: Callable[[_Writer], None]) -> DemoReport:
    writer = _Writer(output, report)
    ok = False
    try:
        fill(writer)
        ok = True
    finally:
        writer.close(ok=ok)
    _validate(output, report)
    return report


def _validate(output: Path, report: DemoReport) -> None:
    """Check the written rows with the warm start's own loader and leave out the ones it would
    reject (a passed sample whose tool-call arguments are not JSON, say), each reported with
    its source, so the file is one a training run takes whole."""
    from osmosis_ai.data import load_demonstrations

    _rows, problems = load_demonstrations(output)
    bad = {p.line: p for p in problems if p.line is not None}
    if not problems:
        return
    lines = output.read_text(encoding="utf-8").splitlines(keepends=True)
    kept = []
    for lineno, line in enumerate(lines, start=1):
        if lineno not in bad:
            kept.append(line)
            continue
        report.kept -= 1
        source = json.loads(line).get("source")
        report.problem(
            f"{source}: left out, the warm start would reject it ({bad[lineno].message})"
        )
    tmp = output.with_name(f".{output.name}.tmp")
    tmp.write_text("".join(kept), encoding="utf-8")
    os.replace(tmp, output)


# --- eval runs ----------------------------------------------------------------------------


def _bad_lines(found: JsonLines) -> list[tuple[int, str]]:
    """``(line, why)`` of each line that did not parse or is not a JSON object, in order."""
    bad = found.bad + [(n, "not a JSON object") for n, v in found.records if not isinstance(v, dict)]
    return sorted(bad)


def _eval_records(path: Path, report: DemoReport) -> list[EvalRecord]:
    """The readable records of ``results.jsonl``; each bad line is a located problem."""
    try:
        found = read_jsonl(path, under=path.parent.parent)
    except UnreadableFileError as exc:
        raise OsmosisError(f"{exc}; the eval results cannot be read") from None
    for lineno, why in _bad_lines(found):
        report.problem(f"{path}:{lineno}: not a result record: {why}; line skipped")
    records = []
    for lineno, value in found.records:
        if not isinstance(value, dict):
            continue  # reported above
        try:
            records.append(EvalRecord.model_validate(value))
        except ValidationError as exc:
            first = str(exc).splitlines()[0][:160]
            report.problem(f"{path}:{lineno}: not a result record ({first}); line skipped")
    return sorted(records, key=lambda r: (r.row_index, r.run_index, r.sample_id or ""))


_TRACE = re.compile(r"traces/[A-Za-z0-9_-][A-Za-z0-9_.-]{0,250}\.json")
"""What a result's ``trace`` may name: one file of the eval run's own ``traces/`` folder."""


def _read_trace(run_dir: Path, name: str) -> dict[str, Any]:
    """The trace ``name`` of the eval run in ``run_dir``: a ``traces/<name>.json`` regular file
    inside it (no link followed). A path outside and a missing file give the same error, so
    a crafted ``results.jsonl`` cannot probe which files exist elsewhere."""
    path = run_dir / name
    if not _TRACE.fullmatch(name) or ".." in name:
        raise ValueError(f"trace {name!r}: no such trace file in {run_dir / 'traces'}")
    try:
        return read_json_object(path, under=run_dir.parent)
    except UnreadableFileError as exc:
        if exc.missing:
            raise ValueError(f"trace {name!r}: no such trace file in {run_dir / 'traces'}") from None
        raise ValueError(str(exc)) from None


def demos_from_eval(
    run: str | Path,
    output: Path,
    *,
    min_reward: float | None = None,
    root: Path | None = None,
    on_progress: Progress | None = None,
) -> DemoReport:
    """Write the passed samples of an eval run as warm-start rows; return the counts.

    Args:
        run: the eval run: its folder name under ``root`` (a unique prefix works) or a path.
        output: the JSONL file to write (replaced whole once every row is written).
        min_reward: keep samples with at least this reward (default: the run's pass threshold).
        root: the ``.osmosis/evals`` folder (default: the current workspace's).
        on_progress: called with ``(done, total)`` samples.

    Raises:
        OsmosisError: no such run, or its results cannot be read at all.
    """
    from osmosis_ai.eval._store import evals_root, find_eval_run

    view = find_eval_run(root or evals_root(), str(run))
    results = view.path / "results.jsonl"
    if not results.exists() and not results.is_symlink():
        raise OsmosisError(
            f"{view.path}: no results.jsonl (status {view.status}); the eval run has not "
            "written any result yet"
        )
    if min_reward is None:
        if view.info is None:
            why = "; ".join(view.problems) or f"{view.path / 'run.json'}: missing"
            raise OsmosisError(
                f"{why}: so the run's pass threshold is unknown; pass --min-reward R"
            )
        min_reward = view.info.pass_threshold
    threshold = min_reward
    report = DemoReport(source=f"eval run {view.path}", output=output, min_reward=threshold)
    records = _eval_records(results, report)

    def fill(writer: _Writer) -> None:
        for done, record in enumerate(records, start=1):
            report.samples += 1
            _eval_sample(view.path, record, threshold, writer)
            if on_progress is not None:
                on_progress(done, len(records))

    return _write(output, report, fill)


def _eval_sample(run_dir: Path, record: EvalRecord, threshold: float, writer: _Writer) -> None:
    report = writer.report
    if record.status != "success" or record.reward is None:
        report.failed += 1
        return
    if not record.reward >= threshold:
        report.below_threshold += 1
        return
    where = f"row {record.row_index} run {record.run_index} sample {record.sample_id}"
    if record.trace is None:
        report.problem(f"{run_dir / 'results.jsonl'}: {where} has no trace file")
        return
    results = run_dir / "results.jsonl"
    try:
        trace = _read_trace(run_dir, record.trace)
    except ValueError as exc:
        report.problem(f"{results}: {where}: {exc}")
        return
    path = run_dir / record.trace
    try:
        convs = conversations_from_calls(list(trace.get("calls") or []))
    except (TypeError, ValueError) as exc:
        report.problem(f"{path}: {exc}")
        return
    if not convs:
        report.problem(f"{path}: no policy calls recorded, so there is no conversation to keep")
        return
    name = run_dir.name
    for k, (messages, tools) in enumerate(convs):
        part = f"#{k}" if len(convs) > 1 else ""
        source = (
            f"eval:{name}/row{record.row_index}/run{record.run_index}/"
            f"{record.sample_id or 'main'}{part}"
        )
        writer.add(messages, tools, record.reward, source)


# --- training runs ------------------------------------------------------------------------


def _split_ref(spec: str) -> tuple[str, int | None]:
    head, sep, tail = spec.rpartition(":")
    if sep and head and tail.isdigit():
        return head, int(tail)
    return spec, None


def _run_threshold(run_dir: Path, report: DemoReport | None = None) -> float:
    """``[evaluation] pass_threshold`` of the run's config snapshot (1.0 when unset or when
    the snapshot cannot be read: that is then a reported problem)."""
    from osmosis_ai.runs._schema import run_file_root

    try:
        _text, data = read_toml(run_dir / "config.toml", under=run_file_root(run_dir))
    except UnreadableFileError as exc:
        if report is not None and not exc.missing:
            report.problem(f"{exc}; the pass threshold 1.0 is used")
        return 1.0
    try:
        return float(data.get("evaluation", {}).get("pass_threshold", 1.0))
    except (ValueError, TypeError, AttributeError):
        return 1.0


def _trace_steps(run_dir: Path, step: int | None, spec: str) -> list[int]:
    """The steps to read (every recorded one, or ``step``), through ``osmosis_ai.runs``'s
    trace helpers, as the dashboard reads them."""
    from osmosis_ai.runs import TRACES_DIR, trace_files

    folder = run_dir / TRACES_DIR
    if folder.is_symlink():
        raise OsmosisError(
            f"{folder} is a symbolic link: a run's traces are read only from its own traces/ "
            "folder, never through a link (replace the link with the folder)"
        )
    found = trace_files(run_dir)  # a linked step file is named unreadable, never followed
    steps = list(found)
    if step is not None:
        steps = [step] if step in found else []
        if not steps:
            raise OsmosisError(
                f"{folder}: no trajectories recorded for step {step} of {spec}; steps with "
                "trajectories: " + (", ".join(str(s) for s in found) or "none")
            )
    if not steps:
        raise OsmosisError(
            f"{folder}: the run recorded no trajectories ([logging] trace_samples_per_step = 0, "
            "or no step has finished yet)"
        )
    return steps


def _trace_lines(
    run_dir: Path, steps: list[int], report: DemoReport
) -> Iterator[tuple[str, dict[str, Any]]]:
    from osmosis_ai.runs import read_trace_step, trace_file

    for step in steps:
        path = trace_file(run_dir, step)
        try:
            found = read_trace_step(run_dir, step)
        except UnreadableFileError as exc:
            report.problem(str(exc))
            continue
        for lineno, why in _bad_lines(found):
            report.problem(f"{path}:{lineno}: not a trajectory record: {why}; line skipped")
        for lineno, record in found.records:
            if isinstance(record, dict):
                yield f"{path}:{lineno}", record


def demos_from_run(
    spec: str,
    output: Path,
    *,
    min_reward: float | None = None,
    root: Path | None = None,
    on_progress: Progress | None = None,
) -> DemoReport:
    """Write a training run's recorded trajectories that reached ``min_reward`` as rows.

    ``spec`` is ``RUN`` (every recorded step) or ``RUN:STEP``. Only the samples the run kept
    for the dashboard are there (``[logging] trace_samples_per_step`` per step).
    ``min_reward`` defaults to the run's ``[evaluation] pass_threshold`` (1.0).

    Raises:
        OsmosisError: no such run or step, or the run recorded no trajectories.
    """
    from osmosis_ai.runs import find_run, workspace_runs_root

    query, step = _split_ref(spec.strip())
    run = find_run(root or workspace_runs_root(), query)
    report = DemoReport(source=f"run {run.path}", output=output, min_reward=1.0)
    threshold = _run_threshold(run.path, report) if min_reward is None else min_reward
    report.min_reward = threshold
    steps = _trace_steps(run.path, step, spec)
    lines = list(_trace_lines(run.path, steps, report))

    def fill(writer: _Writer) -> None:
        for done, (where, record) in enumerate(lines, start=1):
            report.samples += 1
            _run_sample(run.run_id, where, record, threshold, writer)
            if on_progress is not None:
                on_progress(done, len(lines))

    return _write(output, report, fill)


def _run_sample(
    run_id: str, where: str, record: dict[str, Any], threshold: float, writer: _Writer
) -> None:
    report = writer.report
    reward = record.get("reward")
    if not isinstance(reward, int | float) or isinstance(reward, bool) or not math.isfinite(reward):
        report.failed += 1
        return
    if not reward >= threshold:
        report.below_threshold += 1
        return
    try:
        messages = chat_messages(list(record.get("messages") or []))
        tools = _tools(record.get("tools"))
    except (TypeError, ValueError) as exc:
        report.problem(f"{where}: {exc}")
        return
    if not messages:
        report.problem(f"{where}: the trajectory has no messages")
        return
    source = (
        f"run:{run_id}/step{record.get('step')}/{record.get('rollout_id')}/"
        f"{record.get('sample_id') or 'main'}"
    )
    writer.add(messages, tools, float(reward), source)
