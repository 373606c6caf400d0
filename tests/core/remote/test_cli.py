"""``osmosis serve`` / ``validate -m`` / ``test`` on the calculator remote-server template.

``serve`` and ``test`` run as real subprocesses on 127.0.0.1; the training cluster (and the
model behind ``osmosis test``) is the fake cluster running in the test's event loop.
"""

from __future__ import annotations

import asyncio
import json
import os
import pty
import re
import select
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from osmosis_ai.cli import main
from osmosis_ai.testing import FakeCluster, tool_call_message

TEMPLATE = Path(__file__).resolve().parents[3] / "templates" / "remote-server"
OSMOSIS = [str(Path(sys.executable).parent / "osmosis")]  # the installed console script
ENV = {**os.environ, "NO_COLOR": "1", "TERM": "dumb", "COLUMNS": "200", "PYTHONUNBUFFERED": "1",
       "LITELLM_LOCAL_MODEL_COST_MAP": "True"}


def calculator(body: dict[str, Any]) -> Any:
    """A model that multiplies the first two numbers with the tool, then repeats the result."""
    last = body["messages"][-1]
    if last["role"] == "tool":
        return last["content"]
    a, b = (float(x) for x in re.findall(r"\d+(?:\.\d+)?", last["content"])[:2])
    return tool_call_message("multiply", {"a": a, "b": b})


def trace_events(root: Path, name: str) -> list[str]:
    """The event names of the one trace file called ``name`` under ``root/<timestamp>/``."""
    [trace] = list(root.glob(f"*/{name}"))
    return [json.loads(line)["event"] for line in trace.read_text().splitlines()]


@asynccontextmanager
async def serve(*args: str, env: dict[str, str] | None = None) -> AsyncIterator[tuple[str, list[str], Any]]:
    """Run ``osmosis serve -m server:agent_loop -p 0 ARGS`` in the template; yield (url, lines, proc)."""
    proc = await asyncio.create_subprocess_exec(
        *OSMOSIS, "serve", "-m", "server:agent_loop", "-p", "0", *args, cwd=TEMPLATE,
        env={**ENV, **(env or {})}, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    lines: list[str] = []
    assert proc.stdout is not None
    try:
        url = None
        while url is None:
            raw = await asyncio.wait_for(proc.stdout.readline(), 60)
            if not raw:
                raise AssertionError("osmosis serve exited:\n" + "".join(lines))
            lines.append(raw.decode())
            if m := re.search(r"URL: (http://\S+)", lines[-1]):
                url = m.group(1)
        yield url, lines, proc
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGINT)
            try:
                rest = await asyncio.wait_for(proc.stdout.read(), 30)
                lines.append(rest.decode())
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                proc.kill()
                await proc.wait()


def test_validate_module_on_the_template(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(TEMPLATE)
    assert main(["validate", "-m", "server:agent_loop"]) == 0
    out = capsys.readouterr().out
    assert "✓ Agent loop validated successfully" in out
    assert "Tools: 4 (add, subtract, multiply, divide)" in out
    assert main(["validate", "-m", "server:agent_loop", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True and report["name"] == "calculator"
    assert main(["validate", "-m", "server:no_such_thing"]) == 1


async def test_serve_the_template_for_a_cluster(tmp_path: Path) -> None:
    env = {"OSMOSIS_ROLLOUT_SERVER_MAX_BODY_BYTES": "100000"}
    async with FakeCluster(calculator, api_key="cluster-key") as cluster, \
            serve("--api-key", "serve-key", "--log", str(tmp_path), env=env) as (url, lines, proc):
        text = "".join(lines)
        assert "Agent: calculator" in text and "Tools: 4 (add, subtract, multiply, divide)" in text
        assert "API key (given): … (9 characters)" in text and "serve-key" not in text
        assert url.startswith("http://127.0.0.1:")
        auth = {"Authorization": "Bearer serve-key"}
        body = {"rollout_id": "cli-1", "server_url": cluster.url, "api_key": "cluster-key",
                "messages": [{"role": "user", "content": "What is 6 * 7?"}],
                "metadata": {"ground_truth": "42"}}
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            first = await http.post("/v1/rollout/init", json=body, headers=auth)
            assert first.status_code == 202
            assert [t["function"]["name"] for t in first.json()["tools"]] == ["add", "subtract", "multiply", "divide"]
            dup = await http.post("/v1/rollout/init", json=body, headers=auth)
            assert (dup.status_code, dup.json()) == (202, first.json())
            assert (await http.post("/v1/rollout/init", json=body)).status_code == 401
            assert (await http.post("/v1/rollout/init", json=body, headers={"Authorization": "Bearer x"})).status_code == 403
            bad = await http.post("/v1/rollout/init", content=b"{nope", headers={**auth, "content-type": "application/json"})
            assert bad.status_code == 400
            big = await http.post("/v1/rollout/init", headers=auth, json={**body, "metadata": {"x": "y" * 200_000}})
            assert big.status_code == 413
            result = await cluster.wait_for("cli-1", timeout_s=30)
            health = (await http.get("/health", headers=auth)).json()
    assert result["status"] == "COMPLETED" and result["reward"] == 1.0
    assert result["final_messages"][-1]["content"] == "42"
    assert len(cluster.callbacks["cli-1"]) == 1
    assert len(cluster.chat_calls) == 2  # the duplicate init ran nothing
    assert health["completed_rollouts"] == 1
    assert proc.returncode == 0  # SIGINT: graceful shutdown
    events = trace_events(tmp_path, "rollout-cli-1.jsonl")
    assert events[0] == "init" and events[-2:] == ["result", "callback"]
    assert events.count("tool_call") == 1


async def test_serve_options_limit_bodies_and_callback_hosts() -> None:
    # The options win over the environment (which allows 100,000 bytes and any host).
    env = {"OSMOSIS_ROLLOUT_SERVER_MAX_BODY_BYTES": "100000"}
    args = ("--local", "--max-body-bytes", "4096", "--allowed-callback-host", "LOCALHOST",
            "--allowed-callback-host", "10.0.0.0/8")
    async with FakeCluster(calculator) as cluster, serve(*args, env=env) as (url, lines, _proc):
        assert "Callbacks to: the init's own address, localhost, 10.0.0.0/8" in "".join(lines)
        port = httpx.URL(cluster.url).port
        body = {"rollout_id": "opt-1", "server_url": f"http://localhost:{port}",
                "messages": [{"role": "user", "content": "What is 6 * 7?"}],
                "metadata": {"ground_truth": "42"}}
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            refused = await http.post("/v1/rollout/init", json={
                **body, "rollout_id": "opt-2", "server_url": "http://192.0.2.7:9"})
            big = await http.post("/v1/rollout/init", json={**body, "metadata": {"x": "y" * 5000}})
            # localhost is not the init's own address (127.0.0.1): only the option lets it in.
            listed = await http.post("/v1/rollout/init", json=body)
            assert listed.status_code == 202, listed.text
            result = await cluster.wait_for("opt-1", timeout_s=30)
    assert refused.status_code == 403
    assert "server_url host '192.0.2.7' is not allowed" in refused.json()["error"]
    assert "osmosis serve --allowed-callback-host 192.0.2.7" in refused.json()["error"]
    assert big.status_code == 413
    assert big.json() == {"error": "request body too large", "detail": (
        "the limit is 4096 bytes (osmosis serve --max-body-bytes, or "
        "OSMOSIS_ROLLOUT_SERVER_MAX_BODY_BYTES)")}
    assert result["status"] == "COMPLETED" and result["reward"] == 1.0


async def test_serve_refuses_bad_limit_options_before_starting() -> None:
    rc, out = await run_cli("serve", "-m", "server:agent_loop", "--max-body-bytes", "10")
    assert rc == 1 and "invalid ServerSettings value for --max-body-bytes" in out
    assert "greater than or equal to 1024" in out and "Traceback" not in out
    rc, out = await run_cli("serve", "-m", "server:agent_loop",
                            "--allowed-callback-host", "http://trainer:8000")
    assert rc == 1 and "'http://trainer:8000' is not a host name, an IP address or a CIDR range" in out


async def test_serve_generates_a_key_and_local_turns_auth_off() -> None:
    async with serve() as (url, lines, _proc):
        key = re.search(r"API key \(generated\): (\S+)", "".join(lines))
        assert key is not None
        async with httpx.AsyncClient(base_url=url) as http:
            assert (await http.get("/health")).status_code == 401
            assert (await http.get("/health", headers={"Authorization": f"Bearer {key.group(1)}"})).status_code == 200
    async with serve("--local") as (url, lines, _proc):
        assert "AUTHENTICATION IS OFF" in "".join(lines)
        async with httpx.AsyncClient(base_url=url) as http:
            assert (await http.get("/health")).json()["agent_loop"] == "calculator"


async def run_cli(*args: str, stdin: bytes = b"") -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *OSMOSIS, *args, cwd=TEMPLATE, env=ENV, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(stdin), 120)
    return proc.returncode or 0, out.decode()


async def test_test_command_prints_rewards() -> None:
    async with FakeCluster(calculator) as cluster:
        rc, out = await run_cli("test", "-m", "server:agent_loop", "-d", "test_data.jsonl",
                                "--limit", "3", "--offset", "1", "--model", f"{cluster.url}/v1")
        assert rc == 0, out
        assert "Testing agent loop calculator" in out
        # rows 1..3 of the file: 7*8=56 (right), 100-58 (the fake multiplies: wrong), 81/9 (wrong)
        assert re.search(r"row\s+0\s+COMPLETED\s+stop\s+reward 1 ", out), out
        assert re.search(r"row\s+1\s+COMPLETED\s+stop\s+reward 0 ", out), out
        assert "3 rows: 3 completed, 0 errored; mean reward 0.333" in out
        rc, out = await run_cli("test", "-m", "server:agent_loop", "-d", "test_data.jsonl",
                                "--limit", "2", "--max-turns", "1", "--json", "--model", f"{cluster.url}/v1")
    assert rc == 0, out
    report = json.loads(out)
    assert report["summary"]["rows"] == 2
    assert {r["finish_reason"] for r in report["results"]} == {"max_turns"}
    assert {r["reward"] for r in report["results"]} == {0.0}  # truncated: no answer yet, still scored
    assert all(r["llm_calls"] == 1 for r in report["results"])


async def test_test_command_reports_errors_with_exit_1() -> None:
    async with FakeCluster(calculator, llm_fault_rate=1.0, hang_fraction=0.0) as cluster:
        rc, out = await run_cli("test", "-m", "server:agent_loop", "-d", "test_data.jsonl",
                                "--limit", "1", "--model", f"{cluster.url}/v1")
    assert rc == 1
    assert "ERROR" in out and "LLM call failed" in out
    assert "1 rows: 0 completed, 1 errored" in out


class Pty:
    """A child process on a pseudo-terminal, read and written from the event loop."""

    def __init__(self, argv: list[str], cwd: Path) -> None:
        import subprocess

        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen(argv, cwd=cwd, env=ENV, stdin=slave, stdout=slave,
                                     stderr=slave, close_fds=True)
        os.close(slave)
        self.buffer = ""

    def _read(self, timeout: float) -> str:
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return ""
        try:
            return os.read(self.master, 65536).decode(errors="replace")
        except OSError:  # the child closed the terminal
            return ""

    async def expect(self, pattern: str, timeout_s: float = 60) -> str:
        """Wait until ``pattern`` appears in the output; return the output up to it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            m = re.search(pattern, self.buffer)
            if m:
                seen, self.buffer = self.buffer[: m.end()], self.buffer[m.end():]
                return seen
            if loop.time() > deadline or self.proc.poll() is not None and not self._pending():
                raise AssertionError(f"{pattern!r} not found in:\n{self.buffer}")
            self.buffer += (await asyncio.to_thread(self._read, 0.2)).replace("\r\n", "\n")

    def _pending(self) -> bool:
        chunk = self._read(0.05)
        self.buffer += chunk.replace("\r\n", "\n")
        return bool(chunk)

    def send(self, key: str) -> None:
        os.write(self.master, (key + "\n").encode())

    def close(self) -> int:
        try:
            return self.proc.wait(30)
        finally:
            os.close(self.master)


async def test_interactive_mode_through_a_pty() -> None:
    prompt = r"\[n\]ext  \[c\]ontinue  \[m\]essages  \[t\]ools  \[q\]uit > "
    async with FakeCluster(calculator) as cluster:
        term = Pty([*OSMOSIS, "test", "-m", "server:agent_loop", "-d", "test_data.jsonl",
                    "--limit", "3", "--model", f"{cluster.url}/v1", "--interactive"], TEMPLATE)
        try:
            await term.expect(r"LLM call 1 · 2 messages")
            await term.expect(prompt)
            term.send("t")
            tools = await term.expect(prompt)
            assert "multiply: Multiply two numbers: a * b" in tools
            term.send("m")
            messages = await term.expect(prompt)
            assert "1 user: What is 12 + 30?" in messages
            assert len(cluster.chat_calls) == 0  # nothing is called before 'n'
            term.send("n")
            reply = await term.expect(r"LLM call 2 · 4 messages")
            assert "reply (tool_calls): assistant: → multiply" in reply
            assert len(cluster.chat_calls) == 1
            await term.expect(prompt)
            term.send("c")  # finish row 0 without pausing
            await term.expect(r"row\s+0\s+COMPLETED")
            await term.expect(r"LLM call 1 · 2 messages")  # row 1 pauses again
            await term.expect(prompt)
            term.send("x")
            await term.expect(r"unknown key 'x'")
            term.send("q")
            await term.expect(r"1 rows: 1 completed, 0 errored.*\(stopped by\s+user\)")
            assert term.close() == 0
        finally:
            if term.proc.poll() is None:
                term.proc.kill()
    assert len(cluster.chat_calls) == 2  # row 0: two calls; row 1's first call was never made


async def _stall(url: str, key: str) -> asyncio.StreamWriter:
    """A client that sends its headers and one byte of a 1000-byte body, then nothing."""
    parts = httpx.URL(url)
    _reader, writer = await asyncio.open_connection(parts.host, parts.port)
    writer.write(f"POST /v1/rollout/init HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
                 "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{".encode())
    await writer.drain()
    # A request answered after the stalled one was sent: the server has read the stall too.
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        assert (await http.get("/health", headers={"Authorization": f"Bearer {key}"})).status_code == 200
    return writer


async def _read_until(proc: Any, pattern: str, seen: list[str]) -> None:
    while not re.search(pattern, "".join(seen)):
        raw = await asyncio.wait_for(proc.stdout.readline(), 120)  # safety net against a hang
        if not raw:
            raise AssertionError(f"{pattern!r} never printed:\n" + "".join(seen))
        seen.append(raw.decode())


async def _rest(proc: Any) -> str:
    """What the exited server printed after the lines already read."""
    chunks = []
    while chunk := await asyncio.wait_for(proc.stdout.read(65536), 60):
        chunks.append(chunk)
    return b"".join(chunks).decode()


async def test_a_stalled_client_does_not_hold_ctrl_c() -> None:
    async with serve("--api-key", "serve-key") as (url, lines, proc):
        writer = await _stall(url, "serve-key")
        proc.send_signal(signal.SIGINT)
        await asyncio.wait_for(proc.wait(), 120)  # before: waited for the stalled body forever
        writer.close()
        lines.append(await _rest(proc))
    assert proc.returncode == 0
    assert "Traceback" not in "".join(lines)


async def test_a_second_ctrl_c_still_reports_in_flight_rollouts() -> None:
    env = {"OSMOSIS_ROLLOUT_SERVER_SHUTDOWN_GRACE_SECONDS": "600"}  # only a 2nd Ctrl-C ends it
    async with FakeCluster(calculator, llm_fault_rate=1.0, hang_fraction=1.0,
                           hang_seconds=20) as cluster, \
            serve("--api-key", "serve-key", env=env) as (url, lines, proc):
        body = {"rollout_id": "stuck", "server_url": cluster.url,
                "messages": [{"role": "user", "content": "What is 6 * 7?"}]}
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            resp = await http.post("/v1/rollout/init", json=body,
                                   headers={"Authorization": "Bearer serve-key"})
            assert resp.status_code == 202
        writer = await _stall(url, "serve-key")
        proc.send_signal(signal.SIGINT)
        await _read_until(proc, r"rollout\(s\) in flight get up to", lines)  # 1st one handled
        proc.send_signal(signal.SIGINT)
        result = await cluster.wait_for("stuck", timeout_s=120)
        await asyncio.wait_for(proc.wait(), 120)
        writer.close()
        lines.append(await _rest(proc))
    assert result["status"] == "ERROR" and result["error_message"] == "server shutting down"
    assert proc.returncode == 0
    assert "Traceback" not in "".join(lines)
