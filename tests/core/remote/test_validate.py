"""validate_agent_loop and load_agent_loop."""

from __future__ import annotations

import itertools
import textwrap
from pathlib import Path

import pytest

from osmosis_ai.errors import DiscoveryError
from osmosis_ai.remote import load_agent_loop, validate_agent_loop

TEMPLATE = Path(__file__).resolve().parents[3] / "templates" / "remote-server"
_ids = itertools.count()

HEADER = """
from osmosis_ai.remote import RolloutAgentLoop

class Loop(RolloutAgentLoop):
    name = "probe"
    def get_tools(self, request):
        return TOOLS
    async def run(self, ctx):
        return ctx.complete([])

"""


def write_module(tmp_path: Path, body: str) -> str:
    """Write a uniquely named module; returns its ``path:attr`` spec."""
    path = tmp_path / f"loop_mod_{next(_ids)}.py"
    path.write_text(textwrap.dedent(body))
    return f"{path}:agent_loop"


def codes(report: object) -> tuple[set[str], set[str]]:
    return ({i.code for i in report.errors}, {i.code for i in report.warnings})  # type: ignore[attr-defined]


def test_the_template_validates(monkeypatch: pytest.MonkeyPatch) -> None:
    report = validate_agent_loop(f"{TEMPLATE / 'server.py'}:agent_loop")
    assert report.ok, report.lines()
    assert report.name == "calculator"
    assert report.tools == ["add", "subtract", "multiply", "divide"]
    lines = report.lines()
    assert lines[0] == "✓ Agent loop validated successfully"
    assert "  Tools: 4 (add, subtract, multiply, divide)" in lines
    dump = report.model_dump(mode="json")
    assert dump["ok"] is True and dump["name"] == "calculator"


def test_bad_tools_are_reported_with_codes(tmp_path: Path) -> None:
    spec = write_module(tmp_path, HEADER + """
TOOLS = [
    {"function": {"name": "a", "parameters": {"type": "object"}}},
    {"type": "function"},
    {"type": "function", "function": {"name": "bad name!"}},
    {"type": "function", "function": {"name": "p", "description": "d", "parameters": "x"}},
    {"type": "retrieval", "function": {"name": "q", "description": "d",
     "parameters": {"type": "array", "required": ["z"]}}},
    {"type": "function", "function": {"name": "q", "description": "dup"}},
]
agent_loop = Loop()
""")
    report = validate_agent_loop(spec)
    errors, warnings = codes(report)
    assert not report.ok
    assert errors == {"MISSING_TOOL_TYPE", "MISSING_FUNCTION", "INVALID_FUNCTION_NAME",
                      "INVALID_PARAMETERS_TYPE", "DUPLICATE_TOOL_NAME"}
    assert warnings == {"MISSING_FUNCTION_DESCRIPTION", "UNKNOWN_TOOL_TYPE",
                        "PARAMETERS_TYPE_NOT_OBJECT", "REQUIRED_NOT_IN_PROPERTIES"}
    assert report.lines()[0].startswith("✗ Agent loop")


@pytest.mark.parametrize(
    ("tools_expr", "code"),
    [
        ("None", "GET_TOOLS_RETURNS_NONE"),
        ("'add'", "GET_TOOLS_NOT_A_LIST"),
        ("[1]", "TOOL_NOT_A_DICT"),
        ("1 / 0", "GET_TOOLS_EXCEPTION"),
        ("[{'type': 'function', 'function': {'name': 'f', 'x': float('nan')}}]", "TOOLS_NOT_JSON"),
    ],
)
def test_get_tools_problems(tmp_path: Path, tools_expr: str, code: str) -> None:
    spec = write_module(tmp_path, HEADER.replace("return TOOLS", f"return {tools_expr}") + "agent_loop = Loop()\n")
    assert code in codes(validate_agent_loop(spec))[0]


def test_sync_run_and_async_get_tools(tmp_path: Path) -> None:
    spec = write_module(tmp_path, """
from osmosis_ai.remote import RolloutAgentLoop

class Loop(RolloutAgentLoop):
    name = "x"
    async def get_tools(self, request):
        return []
    def run(self, ctx):
        return ctx.complete([])

agent_loop = Loop
""")
    report = validate_agent_loop(spec)
    assert codes(report)[0] == {"RUN_NOT_ASYNC"}
    assert report.tools == []


def test_load_errors(tmp_path: Path) -> None:
    with pytest.raises(DiscoveryError, match="module:attr"):
        load_agent_loop("server")
    with pytest.raises(DiscoveryError, match="no such module"):
        load_agent_loop("definitely_missing_module_xyz:agent_loop", cwd=tmp_path)
    spec = write_module(tmp_path, HEADER + "TOOLS = []\nagent_loop = Loop()\nother = 3\n")
    path = spec.rsplit(":", 1)[0]
    with pytest.raises(DiscoveryError, match="has no attribute 'nope'; it defines Loop, agent_loop"):
        load_agent_loop(f"{path}:nope")
    with pytest.raises(DiscoveryError, match="expected a RolloutAgentLoop instance"):
        load_agent_loop(f"{path}:other")
    broken = write_module(tmp_path, "raise RuntimeError('import-time failure')\n")
    with pytest.raises(DiscoveryError, match="import-time failure"):
        load_agent_loop(broken)
    report = validate_agent_loop(broken)
    assert codes(report)[0] == {"LOAD_ERROR"}
    with pytest.raises(DiscoveryError, match="does not exist"):
        load_agent_loop(f"{tmp_path / 'missing.py'}:x")


def test_module_spec_from_cwd(tmp_path: Path) -> None:
    (tmp_path / "cwd_loop_mod.py").write_text(textwrap.dedent(HEADER + "TOOLS = []\nagent_loop = Loop()\n"))
    loop = load_agent_loop("cwd_loop_mod:agent_loop", cwd=tmp_path)
    assert loop.name == "probe"
    assert load_agent_loop("cwd_loop_mod:Loop", cwd=tmp_path).name == "probe"  # a class is built
