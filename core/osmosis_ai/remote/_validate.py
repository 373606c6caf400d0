"""Static checks of an agent loop: ``osmosis validate -m module:attr`` calls
:func:`validate_agent_loop`.

Error codes: ``LOAD_ERROR, MISSING_NAME, EMPTY_NAME, RUN_NOT_ASYNC, GET_TOOLS_EXCEPTION,
GET_TOOLS_RETURNS_NONE, GET_TOOLS_NOT_A_LIST, TOOL_NOT_A_DICT, TOOLS_NOT_JSON, MISSING_TOOL_TYPE,
MISSING_FUNCTION, INVALID_FUNCTION_NAME, DUPLICATE_TOOL_NAME, INVALID_PARAMETERS_TYPE``.
Warnings: ``UNKNOWN_TOOL_TYPE, MISSING_FUNCTION_DESCRIPTION, PARAMETERS_TYPE_NOT_OBJECT,
REQUIRED_NOT_IN_PROPERTIES``.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, computed_field

from osmosis_ai.errors import DiscoveryError
from osmosis_ai.remote._loader import coerce_agent_loop, load_agent_loop
from osmosis_ai.remote._loop import RolloutAgentLoop
from osmosis_ai.remote._protocol import RolloutRequest

__all__ = ["AgentLoopIssue", "AgentLoopReport", "validate_agent_loop"]

_FUNCTION_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class AgentLoopIssue(BaseModel):
    """One problem found: a stable ``code``, a message that says how to fix it, and where."""

    code: str
    message: str
    severity: Literal["error", "warning"] = "error"
    tool: str | None = None


class AgentLoopReport(BaseModel):
    """What :func:`validate_agent_loop` found. ``ok`` is true when there are no errors."""

    spec: str
    name: str | None = None
    tools: list[str] = Field(default_factory=list)
    tool_schemas: list[dict[str, Any]] = Field(default_factory=list)
    errors: list[AgentLoopIssue] = Field(default_factory=list)
    warnings: list[AgentLoopIssue] = Field(default_factory=list)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ok(self) -> bool:
        """True when no error was found (warnings allowed)."""
        return not self.errors

    def lines(self, verbose: bool = False) -> list[str]:
        """The report as text lines, for ``osmosis validate -m``."""
        out: list[str] = []
        if self.ok:
            out.append("✓ Agent loop validated successfully")
        else:
            out.append(f"✗ Agent loop {self.spec} has {len(self.errors)} problem(s)")
        if self.name is not None:
            out.append(f"  Name: {self.name}")
        if self.tools or self.ok:
            names = f" ({', '.join(self.tools)})" if self.tools else ""
            out.append(f"  Tools: {len(self.tools)}{names}")
        for issue in self.errors:
            out.append(f"  error {issue.code}: {issue.message}")
        for issue in self.warnings:
            out.append(f"  warning {issue.code}: {issue.message}")
        if verbose and self.tool_schemas:
            out.append("  Tool schemas:")
            out.extend("    " + line for line in json.dumps(self.tool_schemas, indent=2).splitlines())
        return out

    def _add(self, code: str, message: str, *, warning: bool = False, tool: str | None = None) -> None:
        issue = AgentLoopIssue(code=code, message=message, tool=tool,
                               severity="warning" if warning else "error")
        (self.warnings if warning else self.errors).append(issue)


def validate_agent_loop(
    spec: str | RolloutAgentLoop | type[RolloutAgentLoop],
    *,
    cwd: str | Path | None = None,
    request: RolloutRequest | None = None,
) -> AgentLoopReport:
    """Load the agent loop named by ``spec`` and check its name, ``run`` and tool schemas.

    Never raises for problems in the user's code: they become report errors.
    """
    report = AgentLoopReport(spec=spec if isinstance(spec, str) else repr(spec))
    try:
        loop = load_agent_loop(spec, cwd=cwd) if isinstance(spec, str) else coerce_agent_loop(spec)
    except (DiscoveryError, TypeError) as exc:
        report._add("LOAD_ERROR", str(exc))
        return report
    _check_name(loop, report)
    if not inspect.iscoroutinefunction(type(loop).run):
        report._add("RUN_NOT_ASYNC", f"{type(loop).__name__}.run must be 'async def run(self, ctx)'")
    req = request or RolloutRequest(
        rollout_id="validate", server_url="http://localhost",
        messages=[{"role": "user", "content": "validate"}],
    )
    tools = _call_get_tools(loop, req, report)
    if tools is not None:
        _check_tools(tools, report)
    return report


def _check_name(loop: RolloutAgentLoop, report: AgentLoopReport) -> None:
    name = getattr(loop, "name", None)
    if name is None:
        report._add("MISSING_NAME", f"{type(loop).__name__} needs a class attribute 'name'")
    elif not isinstance(name, str) or not name.strip():
        report._add("EMPTY_NAME", f"{type(loop).__name__}.name must be a non-empty string")
    else:
        report.name = name


def _call_get_tools(loop: RolloutAgentLoop, req: RolloutRequest, report: AgentLoopReport) -> list[Any] | None:
    try:
        tools: Any = loop.get_tools(req)
        if inspect.isawaitable(tools):
            tools = _run_awaitable(tools)
    except Exception as exc:
        report._add("GET_TOOLS_EXCEPTION", f"get_tools() raised {type(exc).__name__}: {exc}")
        return None
    if tools is None:
        report._add("GET_TOOLS_RETURNS_NONE", "get_tools() returned None; return [] for no tools")
        return None
    if not isinstance(tools, list | tuple):
        report._add("GET_TOOLS_NOT_A_LIST", f"get_tools() returned {type(tools).__name__}, not a list")
        return None
    out = []
    for i, tool in enumerate(tools):
        if isinstance(tool, BaseModel):
            tool = tool.model_dump(exclude_none=True)
        if not isinstance(tool, dict):
            report._add("TOOL_NOT_A_DICT", f"tool #{i} is a {type(tool).__name__}, not a dict")
            continue
        out.append(tool)
    try:
        json.dumps(out, allow_nan=False)
    except (TypeError, ValueError) as exc:
        report._add("TOOLS_NOT_JSON", f"tool schemas must be plain JSON: {exc}")
    return out


def _run_awaitable(awaitable: Any) -> Any:
    async def _wait() -> Any:
        return await awaitable

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_wait())
    raise RuntimeError("validate an async get_tools() outside a running event loop")


def _check_tools(tools: list[dict[str, Any]], report: AgentLoopReport) -> None:
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        label = f"tool #{i}"
        if "type" not in tool:
            report._add("MISSING_TOOL_TYPE", f"{label} has no 'type'; use \"type\": \"function\"")
        elif tool["type"] != "function":
            report._add("UNKNOWN_TOOL_TYPE", f"{label} has type {tool['type']!r}; only 'function' is "
                        "understood by chat models", warning=True)
        fn = tool.get("function")
        if not isinstance(fn, dict):
            report._add("MISSING_FUNCTION", f"{label} has no 'function' object with name and parameters")
            continue
        name = fn.get("name")
        if not isinstance(name, str) or not _FUNCTION_NAME.match(name):
            report._add("INVALID_FUNCTION_NAME", f"{label} name {name!r} must match [A-Za-z0-9_-]{{1,64}}")
            continue
        report.tools.append(name)
        if name in seen:
            report._add("DUPLICATE_TOOL_NAME", f"two tools are named {name!r}", tool=name)
        seen.add(name)
        if not fn.get("description"):
            report._add("MISSING_FUNCTION_DESCRIPTION", f"tool {name!r} has no description; the "
                        "model picks tools by it", warning=True, tool=name)
        _check_parameters(name, fn.get("parameters"), report)
    report.tool_schemas = tools


def _check_parameters(name: str, params: Any, report: AgentLoopReport) -> None:
    if params is None:
        return
    if not isinstance(params, dict):
        report._add("INVALID_PARAMETERS_TYPE", f"tool {name!r} parameters must be a JSON-schema "
                    f"object, not {type(params).__name__}", tool=name)
        return
    if params.get("type") != "object":
        report._add("PARAMETERS_TYPE_NOT_OBJECT", f"tool {name!r} parameters should have "
                    "\"type\": \"object\"", warning=True, tool=name)
    props = params.get("properties") or {}
    required = params.get("required") or []
    if isinstance(props, dict) and isinstance(required, list):
        for arg in required:
            if arg not in props:
                report._add("REQUIRED_NOT_IN_PROPERTIES", f"tool {name!r} requires {arg!r}, which "
                            "is not in its properties", warning=True, tool=name)
