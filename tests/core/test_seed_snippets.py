"""The original SDK's documented snippets keep running unchanged (the seeds are the contract).

The fixtures below are written for these tests in the shape of the docs' Python snippets: the
same import lines, class shapes and calls. Each one is checked end to end: its imports resolve
where the docs import them, a workflow module passes discovery and runs, and a remote agent
loop passes ``osmosis validate -m``, serves a rollout for a cluster and runs under
``osmosis test`` on a scripted model.
"""

from __future__ import annotations

import ast
import asyncio
import importlib
import json
import os
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

import httpx
import pytest

from osmosis_ai.cli import main
from osmosis_ai.data import DatasetRow
from osmosis_ai.rollout.running import RolloutRunner, load_entrypoint
from osmosis_ai.testing import FakeOpenAIServer, FakeRequest

# The rollout-concepts page: one AgentWorkflow and one Grader in the rollout's entrypoint.
WORKFLOW_MODULE = """
from osmosis_ai.rollout import (
    AgentWorkflow,
    AgentWorkflowContext,
    Grader,
    GraderContext,
)

class SpellWorkflow(AgentWorkflow):
    async def run(self, ctx: AgentWorkflowContext) -> None:
        prompt = ctx.prompt
        await ctx.chat(prompt)

class SpellGrader(Grader):
    async def grade(self, ctx: GraderContext) -> None:
        for sample_id, sample in ctx.samples.items():
            reward = 1.0 if "expected" in str(sample.messages) else 0.0
            ctx.set_sample_reward(sample_id, reward)
"""

# The remote-rollout quick start: a RolloutAgentLoop with OpenAI-format tools, served by
# create_app, its loop body calling ctx.chat with the request's completion params.
AGENT_LOOP_MODULE = '''
import json

from osmosis_ai.rollout import (
    RolloutAgentLoop,
    RolloutContext,
    RolloutResult,
    RolloutRequest,
    create_app,
)

ADDER_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two numbers",
            "parameters": {
                "type": "object",
                "properties": {
                    "a": {"type": "number", "description": "First number"},
                    "b": {"type": "number", "description": "Second number"}
                },
                "required": ["a", "b"]
            }
        }
    }
]

async def run_tool(tool_call):
    args = json.loads(tool_call["function"]["arguments"])
    return args["a"] + args["b"]

class AdderAgent(RolloutAgentLoop):
    """Adds numbers with its one tool"""

    name = "adder"

    def get_tools(self, request: RolloutRequest):
        return ADDER_TOOLS

    async def run(self, ctx: RolloutContext) -> RolloutResult:
        messages = list(ctx.request.messages)

        for turn in range(ctx.request.max_turns):
            result = await ctx.chat(messages, **ctx.request.completion_params)
            messages.append(result.message)

            if not result.has_tool_calls:
                break

            for tool_call in result.tool_calls:
                output = await run_tool(tool_call)

                messages.append({
                    "role": "tool",
                    "tool_call_id": tool_call.get("id"),
                    "content": str(output)
                })
                ctx.record_tool_call()

        return ctx.complete(messages)

agent_loop = AdderAgent()

app = create_app(agent_loop)
'''

SNIPPETS = {"workflow": WORKFLOW_MODULE, "agent_loop": AGENT_LOOP_MODULE}
OSMOSIS = [str(Path(sys.executable).parent / "osmosis")]
ENV = {
    **os.environ,
    "NO_COLOR": "1",
    "TERM": "dumb",
    "COLUMNS": "200",
    "PYTHONUNBUFFERED": "1",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
}


@pytest.fixture(autouse=True)
def _forget_user_modules() -> Any:
    """The fixtures are imported as top-level modules ``server`` and ``main``: drop any module
    of those names before each test (other tests import their own ``server.py``) and after it,
    with the test's sys.path entries, so each test imports its own copy."""
    path = list(sys.path)
    for name in ("server", "main"):
        sys.modules.pop(name, None)
    yield
    sys.path[:] = path
    for name in ("server", "main"):
        sys.modules.pop(name, None)


def _imported_names(source: str) -> list[tuple[str, str]]:
    tree = ast.parse(source)
    return [
        (node.module or "", alias.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    ]


@pytest.mark.parametrize("snippet", sorted(SNIPPETS))
def test_every_imported_name_resolves_where_the_docs_import_it(snippet: str) -> None:
    names = [(m, n) for m, n in _imported_names(SNIPPETS[snippet]) if m.startswith("osmosis_ai")]
    assert names, "the fixture imports from osmosis_ai"
    missing = [f"{m}.{n}" for m, n in names if not hasattr(importlib.import_module(m), n)]
    assert missing == []


def test_the_docs_names_are_the_remote_rooms_objects() -> None:
    import osmosis_ai.remote as remote
    import osmosis_ai.rollout as rollout
    import osmosis_ai.rollout.remote as old_address

    for name in (
        "RolloutAgentLoop",
        "RolloutContext",
        "RolloutRequest",
        "RolloutResult",
        "create_app",
    ):
        assert getattr(rollout, name) is getattr(remote, name) is getattr(old_address, name)
        assert name in rollout.__all__


async def test_a_workflow_module_is_discovered_and_runs(tmp_path: Path) -> None:
    entry = tmp_path / "main.py"
    entry.write_text(textwrap.dedent(WORKFLOW_MODULE))
    ep = load_entrypoint(entry)
    assert ep.workflow_cls.__name__ == "SpellWorkflow"
    assert ep.grader_cls is not None and ep.grader_cls.__name__ == "SpellGrader"
    rows = [
        DatasetRow(i, i, [{"role": "user", "content": q}], "x", {}, None, q)
        for i, q in enumerate(["say it", "say nothing"])
    ]

    def model(request: FakeRequest) -> str:
        return "the expected word" if request.last_user_text == "say it" else "something else"

    async with FakeOpenAIServer(script=model) as server:
        outcomes = await RolloutRunner(ep, server).run_all(rows)
    assert [o.error for o in outcomes] == [None, None]
    assert [o.reward for o in sorted(outcomes, key=lambda o: o.row_index)] == [1.0, 0.0]


def _write_server(tmp_path: Path) -> Path:
    (tmp_path / "server.py").write_text(textwrap.dedent(AGENT_LOOP_MODULE))
    (tmp_path / "test_data.jsonl").write_text(
        "".join(
            json.dumps(
                {
                    "system_prompt": "You add.",
                    "user_prompt": f"What is {a} + {b}?",
                    "ground_truth": str(a + b),
                }
            )
            + "\n"
            for a, b in [(2, 3), (10, 32)]
        )
    )
    return tmp_path


def _adder_model(body: dict[str, Any]) -> Any:
    """Calls ``add`` on the two numbers of the question, then repeats the tool's answer."""
    from osmosis_ai.testing import tool_call_message

    last = body["messages"][-1]
    if last["role"] == "tool":
        return last["content"]
    a, b = (float(x) for x in re.findall(r"\d+", last["content"])[:2])
    return tool_call_message("add", {"a": a, "b": b})


def test_the_agent_loop_validates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(_write_server(tmp_path))
    assert main(["validate", "-m", "server:agent_loop"]) == 0
    out = capsys.readouterr().out
    assert "Agent loop validated successfully" in out and "Tools: 1 (add)" in out


async def test_the_agent_loop_serves_a_rollout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from osmosis_ai.testing import FakeCluster

    monkeypatch.syspath_prepend(str(_write_server(tmp_path)))
    server = importlib.import_module("server")
    app = server.create_app(server.agent_loop, api_key="k")
    body = {
        "rollout_id": "seed-1",
        "messages": [{"role": "user", "content": "What is 4 + 5?"}],
        "completion_params": {"temperature": 0.5, "max_tokens": 64},
    }
    async with FakeCluster(_adder_model) as cluster, app.router.lifespan_context(app):
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://rollout.test"
        ) as http:
            init = await http.post(
                "/v1/rollout/init",
                json={**body, "server_url": cluster.url},
                headers={"Authorization": "Bearer k"},
            )
            assert init.status_code == 202
            assert [t["function"]["name"] for t in init.json()["tools"]] == ["add"]
            result = await cluster.wait_for("seed-1", timeout_s=60)
    assert result["status"] == "COMPLETED", result
    assert result["final_messages"][-1]["content"] == "9.0"
    assert result["final_messages"][-2]["role"] == "tool"
    # the request's completion params reached the model through **ctx.request.completion_params
    assert {c.get("temperature") for c in cluster.chat_calls} == {0.5}
    assert {c.get("max_tokens") for c in cluster.chat_calls} == {64}


async def test_the_agent_loop_runs_under_osmosis_test(tmp_path: Path) -> None:
    from osmosis_ai.testing import FakeCluster

    folder = _write_server(tmp_path)
    async with FakeCluster(_adder_model) as cluster:
        proc = await asyncio.create_subprocess_exec(
            *OSMOSIS,
            "test",
            "-m",
            "server:agent_loop",
            "-d",
            "test_data.jsonl",
            "--json",
            "--model",
            f"{cluster.url}/v1",
            cwd=folder,
            env=ENV,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, out.decode()
    report = json.loads(out)
    assert report["summary"]["rows"] == 2
    assert [r["status"] for r in report["results"]] == ["COMPLETED", "COMPLETED"]
    assert all(r["llm_calls"] == 2 for r in report["results"])
