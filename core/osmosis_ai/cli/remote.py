"""``osmosis serve`` and ``osmosis test``: run and try a remote-rollout agent loop.

- ``osmosis serve -m server:agent_loop``: serve the loop (``/v1/rollout/init`` ...) for a training
  cluster, with a bearer key (generated and printed unless ``--api-key``; ``--local`` turns
  auth off).
- ``osmosis test -m server:agent_loop -d data.jsonl``: run the loop over dataset rows against a
  model (a LiteLLM id, an OpenAI-compatible URL, or the embedded default) and print rewards;
  ``--interactive`` steps through every LLM call. ``-m main.py`` (or a rollout folder) tries an
  entrypoint rollout instead: its workflow and grader, or the ``LocalBackend`` it serves.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import secrets
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from osmosis_ai.console import state
from osmosis_ai.errors import ConfigError

if TYPE_CHECKING:
    from osmosis_ai.remote import AgentLoopReport, ServerSettings

__all__ = ["register"]

ModuleOpt = Annotated[
    str, typer.Option("--module", "-m", help="The agent loop as module:attr, e.g. server:agent_loop.")
]


def serve_command(
    module: ModuleOpt,
    port: Annotated[int, typer.Option("--port", "-p", help="Port to listen on (0: any free port).")] = 9000,
    host: Annotated[
        str, typer.Option("--host", "-H", help="Interface to bind. Use 0.0.0.0 to accept "
                          "connections from other machines (a remote training cluster).")
    ] = "127.0.0.1",
    reload: Annotated[bool, typer.Option("--reload", help="Restart when the code changes.")] = False,
    log: Annotated[
        Path | None, typer.Option("--log", help="Write one JSONL trace per rollout under DIR/<timestamp>/.")
    ] = None,
    local: Annotated[
        bool, typer.Option("--local", help="Turn authentication off (local development only).")
    ] = False,
    api_key: Annotated[
        str | None, typer.Option("--api-key", help="Key clients must send (default: "
                                 "$OSMOSIS_ROLLOUT_API_KEY, else a generated one).")
    ] = None,
    no_validate: Annotated[
        bool, typer.Option("--no-validate", help="Skip the agent-loop checks at startup.")
    ] = False,
    log_level: Annotated[str, typer.Option("--log-level", help="uvicorn log level.")] = "info",
    allowed_callback_host: Annotated[
        list[str] | None,
        typer.Option("--allowed-callback-host", help="A host, IP or CIDR range an init's "
                     "server_url may name (repeatable; the address an init comes from is always "
                     "allowed). Default: any host, or $OSMOSIS_ROLLOUT_SERVER_ALLOWED_CALLBACK_HOSTS."),
    ] = None,
    max_body_bytes: Annotated[
        int | None,
        typer.Option("--max-body-bytes", help="Largest request body; larger ones get 413 "
                     "(default: $OSMOSIS_ROLLOUT_SERVER_MAX_BODY_BYTES, else 16 MiB)."),
    ] = None,
) -> None:
    """Serve an agent loop over the remote-rollout protocol."""
    from osmosis_ai.remote import validate_agent_loop
    from osmosis_ai.remote._serve import ServeOptions, run_server
    from osmosis_ai.remote._settings import ServerSettings

    # Options win over OSMOSIS_ROLLOUT_SERVER_* variables; a bad value stops here, before loading.
    settings = ServerSettings.from_env(
        labels={"allowed_callback_hosts": "--allowed-callback-host",
                "max_body_bytes": "--max-body-bytes"},
        allowed_callback_hosts=allowed_callback_host or None, max_body_bytes=max_body_bytes,
    )

    report = validate_agent_loop(module)
    if not report.ok and not (no_validate and report.name is not None):
        for line in report.lines():
            state.err_console.print(escape(line), soft_wrap=True)
        raise ConfigError(f"agent loop {module} is not valid (see above); fix it or pass --no-validate")
    key = None if local else (api_key or os.environ.get("OSMOSIS_ROLLOUT_API_KEY") or None)
    generated = not local and key is None
    if generated:
        key = secrets.token_urlsafe(24)
    _print_banner(report, settings, host, local, key, generated)
    out = state.console

    def announce(what: str, value: Any) -> None:
        label = {"url": "URL", "logs": "Logs"}.get(what, what)
        out.print(f"  {label}: {escape(str(value))}")
        if what == "url":
            out.print(_exposure_hint(host, local), soft_wrap=True)
        sys.stdout.flush()

    opts = ServeOptions(spec=module, host=host, port=port, reload=reload, log_dir=log,
                        auth=not local, api_key=key, log_level=log_level, settings=settings)
    run_server(opts, announce=announce)


def _print_banner(
    report: AgentLoopReport, settings: ServerSettings, host: str, local: bool,
    key: str | None, generated: bool,
) -> None:
    """What is served, where callbacks may go, and how clients authenticate."""
    out = state.console
    out.print("Osmosis rollout server starting...")
    out.print(f"  Agent: {escape(report.name or '?')}")
    out.print(f"  Tools: {len(report.tools)}" + (f" ({escape(', '.join(report.tools))})" if report.tools else ""))
    if settings.allowed_callback_hosts is not None:
        hosts = ", ".join(settings.allowed_callback_hosts) or "none other"
        out.print(f"  Callbacks to: the init's own address, {escape(hosts)}")
    if local:
        _warn_local(host)
    else:
        # A generated key is shown once (nobody else knows it); a given one only as a hint,
        # so terminal scrollback and CI logs never hold the secret the operator chose.
        shown = (key or "") if generated else _mask(key or "")
        out.print(f"  API key ({'generated' if generated else 'given'}): {escape(shown)}")
        out.print("  Clients send: Authorization: Bearer <key>")
    sys.stdout.flush()


def _mask(key: str) -> str:
    return f"{key[:3]}… ({len(key)} characters)" if len(key) >= 12 else f"… ({len(key)} characters)"


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _exposure_hint(host: str, local: bool) -> str:
    """Who can reach the server, and the one flag that changes it (the seeds' habit)."""
    if _is_loopback(host):
        guard = (
            "drop --local first: then every route needs the API key"
            if local
            else "every route still needs the API key"
        )
        return (
            f"  Listening on {host} only: this machine can reach it. For a training cluster on "
            f"another machine pass --host 0.0.0.0 ({guard})."
        )
    return (
        f"  Listening on {host}: other machines can reach it"
        + ("" if local else ", with the API key")
        + ". Put it behind a firewall or a TLS proxy on untrusted networks."
    )


def _warn_local(host: str) -> None:
    state.warn(
        "AUTHENTICATION IS OFF (--local): anyone who can reach this server can start rollouts "
        "and make it call any URL. Use --local only for development on your own machine."
    )
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        state.warn(f"--local with --host {host}: the unauthenticated server is reachable from "
                   "other machines. Bind 127.0.0.1 or drop --local.")


def test_command(
    module: Annotated[str, typer.Option(
        "--module", "-m", help="The agent loop as module:attr (server:agent_loop), or an "
        "entrypoint file or rollout folder (main.py, rollouts/calc).")],
    dataset: Annotated[Path, typer.Option("--dataset", "-d", help="Dataset (.jsonl, .json, .csv, .parquet).")],
    limit: Annotated[int | None, typer.Option("--limit", help="Run at most N rows.")] = None,
    offset: Annotated[int, typer.Option("--offset", help="Skip the first K rows.")] = 0,
    model: Annotated[
        str, typer.Option("--model", help="LiteLLM model id (e.g. openai/gpt-4o-mini), an "
                          "OpenAI-compatible URL (http://host:port/v1), or 'embedded'.")
    ] = "embedded",
    max_turns: Annotated[int, typer.Option("--max-turns", help="LLM calls allowed per row.")] = 10,
    max_tokens_total: Annotated[int, typer.Option("--max-tokens-total", help="Token budget per row.")] = 8192,
    temperature: Annotated[float | None, typer.Option("--temperature")] = None,
    # Unbounded, a small local model can ramble to its context limit: minutes per call on a CPU.
    max_tokens: Annotated[int | None, typer.Option("--max-tokens", help="Per-call completion limit "
                                                   "(raise it for long answers).")] = 256,
    concurrency: Annotated[int, typer.Option("--concurrency", help="Rows run at once.")] = 4,
    interactive: Annotated[
        bool, typer.Option("--interactive", "-i", help="Step through LLM calls: n next, c continue, "
                           "m messages, t tools, q quit.")
    ] = False,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write each row's result (with messages) as JSONL.")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False,
) -> None:
    """Run an agent loop (or an entrypoint rollout) over dataset rows against a model and print
    the rewards."""
    from osmosis_ai.data import read_dataset
    from osmosis_ai.remote import load_agent_loop

    if interactive and json_out:
        raise ConfigError("--interactive and --json cannot be combined")
    if max_turns < 1 or concurrency < 1:
        raise ConfigError("--max-turns and --concurrency must be at least 1")
    from osmosis_ai.cli._entry_test import entrypoint_target

    entry_file = entrypoint_target(module)
    if entry_file is not None and interactive:
        raise ConfigError("--interactive steps through an agent loop's calls (-m module:attr); "
                          "an entrypoint's workflow runs its own loop: drop --interactive")
    loop = load_agent_loop(module) if entry_file is None else None
    # Every row is read and checked before the model loads: a bad line fails in a second,
    # naming file and line, not after the model has loaded and earlier rows have run.
    rows = list(read_dataset(dataset, limit=limit, offset=offset))
    from osmosis_ai.serving.preflight import check_model_reachable

    check_model_reachable(model)  # a missing key or a dead server: one line, nothing written
    params: dict[str, Any] = {k: v for k, v in {"temperature": temperature, "max_tokens": max_tokens}.items()
                              if v is not None}
    if entry_file is not None:
        from osmosis_ai.cli._entry_test import EntrypointTest

        tried = EntrypointTest(entry_file, model=model, sampling=params, concurrency=concurrency,
                               json_out=json_out, output=output)
        _report_test(asyncio.run(tried.run(rows)), json_out)
        return
    assert loop is not None
    from osmosis_ai.cli._remote_test import TestRun

    run = TestRun(loop, model=model, params=params, max_turns=max_turns,
                  max_tokens_total=max_tokens_total, concurrency=concurrency,
                  interactive=interactive, json_out=json_out, output=output)
    _report_test(asyncio.run(run.run(rows, _open_policy(model))), json_out)


def _report_test(summary: dict[str, Any], json_out: bool) -> None:
    if json_out:
        state.emit_json(summary)
    if summary["summary"]["errored"]:
        raise typer.Exit(1)


@asynccontextmanager
async def _open_policy(model: str) -> AsyncIterator[Any]:
    """Serve ``model`` through the policy gateway on 127.0.0.1 (the same path as training)."""
    # Both raise MissingExtraError naming the pip command when an extra is missing.
    from osmosis_ai.serving import create_engine, new_api_key
    from osmosis_ai.serving.gateway import PolicyGateway

    engine = create_engine(model)
    try:
        # The agent loop under test gets the key in each request (RolloutRequest.api_key).
        async with PolicyGateway(engine, api_key=new_api_key()) as gateway:
            yield gateway
    finally:
        await engine.close()


def register(app: typer.Typer) -> None:
    """Add ``serve`` and ``test`` to the root app."""
    app.command("serve")(serve_command)
    app.command("test")(test_command)
