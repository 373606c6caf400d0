"""The body of ``osmosis test``: run rows, print results, and the interactive debugger."""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
from collections.abc import Iterable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

from rich.markup import escape

from osmosis_ai.chat import ChatResult, Message
from osmosis_ai.console import state
from osmosis_ai.remote import (
    ClientSettings,
    ClusterClient,
    RolloutAgentLoop,
    RolloutRequest,
)
from osmosis_ai.remote._local import (
    LocalOutcome,
    LocalRow,
    QuitRequested,
    run_local_rollouts,
)

__all__ = ["Debugger", "TestRun", "summarize_test_run"]

_HELP = "[n]ext  [c]ontinue  [m]essages  [t]ools  [q]uit"


def _short(text: Any, limit: int = 300) -> str:
    s = text if isinstance(text, str) else json.dumps(text, ensure_ascii=False, default=str)
    return s if len(s) <= limit else s[: limit - 3] + "..."


def describe_message(message: Message) -> str:
    """One line for a chat message: role, text, tool calls."""
    role = str(message.get("role", "?"))
    parts = []
    if message.get("content"):
        parts.append(_short(message["content"]))
    for call in message.get("tool_calls") or []:
        fn = call.get("function", {}) if isinstance(call, dict) else {}
        parts.append(f"→ {fn.get('name', '?')}({_short(fn.get('arguments', ''), 120)})")
    if role == "tool":
        parts.insert(0, f"[{message.get('tool_call_id', '')}]")
    return f"{role}: {' '.join(parts) if parts else '(empty)'}"


class Debugger:
    """A :class:`~osmosis_ai.remote._local.ChatHook` that pauses before each LLM call.

    Keys (one per line on stdin): ``n`` make the call, ``c`` run this row to the end, ``m`` show
    the messages, ``t`` show the tools, ``q`` stop. End of input continues without pausing.
    """

    def __init__(self) -> None:
        self._continue: set[str] = set()
        self._eof = False

    async def _ask(self) -> str:
        state.console.print(f"{_HELP} > ", end="", markup=False)
        sys.stdout.flush()
        line = await asyncio.to_thread(sys.stdin.readline)
        if line == "":
            self._eof = True
            return "c"
        return line.strip().lower()[:1] or "n"

    async def before(self, request: RolloutRequest, turn: int, messages: list[Message],
                     params: dict[str, Any]) -> None:
        if self._eof or request.rollout_id in self._continue:
            return
        out = state.console
        out.print(f"\n── {escape(request.rollout_id)} · LLM call {turn} · {len(messages)} messages")
        while True:
            key = await self._ask()
            if key == "n":
                return
            if key == "c":
                self._continue.add(request.rollout_id)
                return
            if key == "m":
                for i, m in enumerate(messages):
                    out.print(f"  {i:>2} {escape(describe_message(m))}", soft_wrap=True)
            elif key == "t":
                tools = params.get("tools") or []
                if not tools:
                    out.print("  (no tools)")
                for tool in tools:
                    fn = tool.get("function", {})
                    out.print(f"  {escape(str(fn.get('name', '?')))}: "
                              f"{escape(str(fn.get('description', '')))}", soft_wrap=True)
            elif key == "q":
                raise QuitRequested()
            else:
                out.print(f"  unknown key {key!r}; {_HELP}", markup=False)

    async def after(self, request: RolloutRequest, turn: int, result: ChatResult) -> None:
        if self._eof or request.rollout_id in self._continue:
            return
        state.console.print(f"  reply ({result.finish_reason}): {escape(describe_message(result.message))}",
                            soft_wrap=True)


class TestRun:
    """Runs the rows against a policy gateway and reports them."""

    def __init__(self, loop: RolloutAgentLoop, *, model: str, params: dict[str, Any],
                 max_turns: int, max_tokens_total: int, concurrency: int, interactive: bool,
                 json_out: bool, output: Path | None) -> None:
        self.loop = loop
        self.model = model
        self.params = params
        self.max_turns = max_turns
        self.max_tokens_total = max_tokens_total
        self.concurrency = concurrency
        self.debugger = Debugger() if interactive else None
        self.json_out = json_out
        self.output = output
        self.outcomes: list[LocalOutcome] = []

    async def run(self, rows: Iterable[LocalRow], policy: AbstractAsyncContextManager[Any]) -> dict[str, Any]:
        if not self.json_out:
            state.console.print(f"Testing agent loop {escape(self.loop.name)} against {escape(self.model)}")
        client = ClusterClient(ClientSettings.from_env(max_retries=2, retry_backoff_seconds=0.5))
        stopped = False
        try:
            async with policy as gateway:
                async def collect(rid: str) -> None:
                    await gateway.collect(rid)

                def server_url(rid: str) -> str:
                    return str(gateway.route(rid, "main").base_url).removesuffix("/v1")

                try:
                    async for outcome in run_local_rollouts(
                        self.loop, rows, server_url_for=server_url, client=client,
                        api_key=gateway.route("x", "main").api_key, completion_params=self.params,
                        max_turns=self.max_turns, max_tokens_total=self.max_tokens_total,
                        concurrency=self.concurrency, hook=self.debugger, after_rollout=collect,
                    ):
                        self._record(outcome)
                except QuitRequested:
                    stopped = True
        finally:
            await client.aclose()
        return self._finish(stopped)

    def _record(self, outcome: LocalOutcome) -> None:
        self.outcomes.append(outcome)
        if self.output is not None:
            self.output.parent.mkdir(parents=True, exist_ok=True)
            with self.output.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps({**outcome.summary(), "messages": outcome.result.final_messages},
                                    ensure_ascii=False, default=str) + "\n")
        if self.json_out:
            return
        s = outcome.summary()
        reward = "-" if s["reward"] is None else f"{s['reward']:.3g}"
        color = "green" if outcome.ok else "red"
        line = (f"row {s['row_index']:>3}  [{color}]{s['status']:<9}[/]  {s['finish_reason'] or '-':<10} "
                f"reward {reward:<6} {s['llm_calls']} LLM calls, {s['tool_calls']} tool calls, "
                f"{s['duration_ms']:.0f} ms")
        state.console.print(line, soft_wrap=True)
        if s["error"]:
            state.console.print(f"         [red]{escape(str(s['error']))}[/]", soft_wrap=True)

    def _finish(self, stopped: bool) -> dict[str, Any]:
        self.outcomes.sort(key=lambda o: o.row_index)
        rewards = [o.result.reward for o in self.outcomes if o.result.reward is not None]
        summary = summarize_test_run(
            rows=len(self.outcomes), completed=sum(o.ok for o in self.outcomes),
            errored=sum(not o.ok for o in self.outcomes), rewards=rewards, stopped=stopped,
            quiet=self.json_out,
        )
        return {"summary": summary, "results": [o.summary() for o in self.outcomes]}


def summarize_test_run(*, rows: int, completed: int, errored: int, rewards: list[float],
                 stopped: bool, quiet: bool) -> dict[str, Any]:
    """The ``summary`` of an ``osmosis test`` run (agent loop or entrypoint), printed unless
    ``quiet``."""
    summary = {
        "rows": rows,
        "completed": completed,
        "errored": errored,
        "with_reward": len(rewards),
        "mean_reward": statistics.fmean(rewards) if rewards else None,
        "stopped_by_user": stopped,
    }
    if not quiet:
        mean = "-" if summary["mean_reward"] is None else f"{summary['mean_reward']:.3f}"
        state.console.print(
            f"\n{rows} rows: {completed} completed, {errored} errored; mean reward {mean} "
            f"over {len(rewards)} rewarded" + (" (stopped by user)" if stopped else "")
        )
    return summary
