"""``osmosis model list|deploy|export``: the checkpoints of training runs, as models.

A checkpoint is named ``RUN[:STEP]``: RUN a run id (``calc-20261124-101500``), a run name
used once, or a unique prefix; STEP a number, ``latest`` (default) or ``best``. Serving and
merging need torch, so they run in the trainer package as a subprocess
(``python -m osmosis_trainer.deploy`` / ``.export``); listing and plain export do not.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from osmosis_ai.console import state
from osmosis_ai.errors import ConfigError, MissingExtraError, OsmosisError
from osmosis_ai.safe_io import read_json_object

_DEPLOY_KEY_ENV = "OSMOSIS_DEPLOY_API_KEY"
"""Where ``model deploy`` takes the key clients must send (never from its command line)."""

if TYPE_CHECKING:
    from osmosis_ai.models import CheckpointRef

__all__ = ["register"]

model_app = typer.Typer(
    name="model",
    help="Trained checkpoints: list them, serve one (OpenAI-compatible), export one.",
    no_args_is_help=True,
)

_EMBEDDED_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"


def _runs_root() -> Path:
    from osmosis_ai.runs import workspace_runs_root

    return workspace_runs_root()


def _resolve(spec: str) -> CheckpointRef:
    from osmosis_ai.models import resolve_checkpoint

    return resolve_checkpoint(spec, _runs_root())


def _require_trainer(feature: str) -> None:
    import importlib.util

    for module in ("torch", "transformers", "peft", "osmosis_trainer"):
        if importlib.util.find_spec(module) is None:
            raise MissingExtraError(feature, "trainer", module)


def _fmt_reward(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


@model_app.command("list")
def list_command(
    run: Annotated[
        str | None, typer.Option("--run", help="Only this run's checkpoints (name or id).")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Every checkpoint across the workspace's training runs: run, step, reward, base model."""
    from rich.markup import escape
    from rich.table import Table

    from osmosis_ai.models import find_checkpoints

    root = _runs_root()
    found = find_checkpoints(root, run=run)
    if json_out:
        state.emit_json([c.as_dict() for c in found])
        return
    if not found:
        state.console.print(
            f"No checkpoints under {root}. Train with 'osmosis train submit CONFIG'; "
            "checkpoints are saved every [checkpoints] checkpoint_save_freq steps.",
            markup=False,  # "[checkpoints]" is the config's section, not a style tag
        )
        return
    table = Table(box=None, pad_edge=False)
    for col in ("model (RUN:STEP)", "status", "step", "reward", "base model", "path"):
        table.add_column(col, overflow="fold")
    for c in found:
        table.add_row(  # from run folders: escaped, never markup
            *(escape(str(v)) for v in (c.label, c.status, c.step, _fmt_reward(c.reward),
                                       c.base_model, c.path))
        )
    state.console.print(table)
    state.console.print(
        "Use one with: osmosis eval run CONFIG --model RUN:STEP --baseline | "
        "osmosis model deploy RUN:STEP | osmosis model export RUN:STEP DIR"
    )


def _served_name(ref: CheckpointRef) -> str:
    return f"{ref.run_name}-step{ref.step}"


@model_app.command("deploy")
def deploy_command(
    checkpoint: Annotated[str, typer.Argument(help="RUN[:STEP], e.g. calc:best or calc:40.")],
    port: Annotated[int, typer.Option("--port", "-p", help="Port (0: any free one).")] = 8000,
    host: Annotated[str, typer.Option("--host", help="Interface to bind.")] = "127.0.0.1",
    name: Annotated[
        str | None, typer.Option("--name", help="Model name clients send (default RUN-stepN).")
    ] = None,
    engine: Annotated[
        str,
        typer.Option("--engine", help="auto (vLLM when installed, else transformers), vllm or hf."),
    ] = "auto",
    device: Annotated[str, typer.Option("--device", help="hf engine: auto, cpu, cuda.")] = "auto",
    max_body_bytes: Annotated[
        int | None,
        typer.Option("--max-body-bytes", help="Largest request body in bytes; "
                     "larger ones get 413 (default: [gateway] max_body_bytes, 32 MiB)."),
    ] = None,
    api_key_file: Annotated[
        str | None,
        typer.Option(
            "--api-key-file", show_default=False,
            help="Read the key clients must send ('Authorization: Bearer KEY') from this file, "
            "or '-' for stdin (asked without echo at a terminal). The key is otherwise taken "
            f"from ${_DEPLOY_KEY_ENV}; never from the command line (default: no key; a warning "
            "when --host is not loopback).",
        ),
    ] = None,
    api_key: Annotated[str | None, typer.Option("--api-key", hidden=True)] = None,
) -> None:
    """Serve a checkpoint on an OpenAI-compatible endpoint until Ctrl-C.

    The key clients must send comes from $OSMOSIS_DEPLOY_API_KEY or --api-key-file, never from
    the command line, which every local user can read (ps, /proc/PID/cmdline) while it serves.
    """
    key = _checked_deploy_options(api_key, api_key_file, max_body_bytes, engine, port)
    ref = _resolve(checkpoint)
    _require_trainer("osmosis model deploy")
    served_name = name or _served_name(ref)
    cmd = _deploy_cmd(ref, served_name, host, port, engine, device, max_body_bytes)
    state.err_console.print(
        f"loading {ref.label} (base {ref.base_model}, adapter {ref.adapter_dir}) ...",
        markup=False,
    )
    served = _record_deploy(ref, host, port, served_name, engine)
    # The key reaches the server through its environment: never on a command line (ps).
    env = {**os.environ, _DEPLOY_KEY_ENV: key} if key else None
    code = _serve_until_signalled(cmd, env)
    _end_deploy(ref, served, code)
    if code not in (0, -2, 130):
        raise typer.Exit(code)


def _checked_deploy_options(
    api_key: str | None, api_key_file: str | None, max_body_bytes: int | None, engine: str,
    port: int,
) -> str | None:
    """``deploy``'s options checked (a ConfigError naming the bad one); the clients' key."""
    if api_key is not None:
        raise ConfigError(
            "--api-key KEY would keep the key in this command's arguments, which every local "
            f"user can read (ps) while it serves: export {_DEPLOY_KEY_ENV}=KEY, or pass "
            "--api-key-file FILE (or '-' to type or pipe it)"
        )
    key = _deploy_key(api_key_file)
    if max_body_bytes is not None:
        _check_body_limit(max_body_bytes)
    if engine not in ("auto", "vllm", "hf"):
        raise ConfigError(f"--engine {engine!r}: use auto, vllm or hf")
    if not 0 <= port <= 65535:
        raise ConfigError(f"--port {port}: use a port between 1 and 65535 (0 picks a free one)")
    return key


def _deploy_cmd(
    ref: CheckpointRef, served_name: str, host: str, port: int, engine: str, device: str,
    max_body_bytes: int | None,
) -> list[str]:
    """The ``osmosis_trainer.deploy`` command line serving ``ref`` (never the key: ps shows it)."""
    from osmosis_ai.runs import resolve_model_path

    base = resolve_model_path(ref.base_model)
    return [
        sys.executable,
        "-m",
        "osmosis_trainer.deploy",
        "--base",
        base,
        "--adapter",
        str(ref.adapter_dir),
        "--name",
        served_name,
        "--label",
        ref.label,
        "--host",
        host,
        "--port",
        str(port),
        "--engine",
        engine,
        "--device",
        device,
        *(["--max-body-bytes", str(max_body_bytes)] if max_body_bytes is not None else []),
    ]


def _deploy_key(key_file: str | None) -> str | None:
    """The deploy key: from ``key_file`` (``-``: stdin, without echo at a terminal), else
    ``$OSMOSIS_DEPLOY_API_KEY``; ``None`` without either."""
    if key_file is None:
        return os.environ.get(_DEPLOY_KEY_ENV) or None
    if key_file == "-":
        if sys.stdin.isatty():
            import getpass

            text = getpass.getpass("API key clients must send: ")
        else:
            text = sys.stdin.readline()
        where = "stdin"
    else:
        from osmosis_ai.errors import UnreadableFileError
        from osmosis_ai.safe_io import read_text

        try:
            text = read_text(Path(key_file), follow=True, max_bytes=4096)
        except UnreadableFileError as exc:
            raise ConfigError(f"--api-key-file: {exc}") from None
        where = key_file
    key = text.strip()
    if not key or any(c.isspace() for c in key):
        raise ConfigError(f"--api-key-file: {where} holds no key (one line, no spaces)")
    return key


def _serve_until_signalled(cmd: list[str], env: dict[str, str] | None = None) -> int:
    """Run the server child until it exits; SIGINT/SIGTERM sent to this process are passed on
    and waited for, so a stop aimed at ``osmosis model deploy`` (not only a terminal's Ctrl-C,
    which reaches both) never leaves the server running, or holding its port, behind it."""
    import signal

    proc = subprocess.Popen(cmd, env=env)

    def forward(signum: int, frame: object) -> None:
        if proc.poll() is None:
            proc.send_signal(signum)

    handled = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.signal(sig, forward) for sig in handled}
    try:
        return proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _check_body_limit(value: int) -> None:
    from pydantic import ValidationError

    from osmosis_ai.config import GatewayConfig

    try:
        GatewayConfig(max_body_bytes=value)
    except ValidationError as exc:
        raise ConfigError(
            f"--max-body-bytes {value}: {exc.errors()[0]['msg']}"
        ) from exc


def _model_card(ref: CheckpointRef, base_id: str, merged: bool) -> str:
    kind = "merged model" if merged else "LoRA adapter (PEFT)"
    reward = _fmt_reward(ref.reward)
    how = (
        'AutoModelForCausalLM.from_pretrained("<this folder>")'
        if merged
        else f'PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained("{base_id}"), '
        '"<this folder>")'
    )
    return (
        f"# {ref.run_name} step {ref.step}\n\n"
        f"A {kind} trained with osmosis (reinforcement learning, GRPO).\n\n"
        f"- base model: `{base_id}`\n- run: `{ref.run_id}`, step {ref.step}\n"
        f"- training reward at that step: {reward}\n\n"
        f"Load it with transformers:\n\n```python\n{how}\n```\n"
    )


def _check_adapter_files(ref: CheckpointRef) -> list[Path]:
    """The adapter's files, relative to its folder: regular files inside the run only.

    An export leaves the machine (``--push-to-hub``), so it carries only what training wrote:
    a link anywhere on the way (``adapter/notes.txt -> ~/.ssh/id_rsa``, a linked checkpoint
    folder) or any other special file is refused, never followed.
    """
    folder = ref.adapter_dir
    where = f"checkpoint {ref.label}"
    inside = folder.is_relative_to(ref.run_dir)
    steps = folder.relative_to(ref.run_dir).parts if inside else ()
    linked = [ref.run_dir.joinpath(*steps[: i + 1]) for i in range(len(steps))]
    if not inside or any(p.is_symlink() for p in linked):
        raise ConfigError(
            f"{where}: {folder} is not a folder of the run {ref.run_dir} (a link leads out); "
            "an export only copies files the run wrote"
        )
    if not folder.is_dir():
        raise ConfigError(f"{where}: no adapter folder at {folder}")
    files = []
    for root, dirs, names in os.walk(folder):
        for name in sorted(dirs + names):
            path = Path(root) / name
            if path.is_symlink() or not (path.is_dir() or path.is_file()):
                raise ConfigError(
                    f"{where}: {path} is a link or a special file; an export only copies "
                    "regular files the run wrote: remove it and export again"
                )
            if path.is_file():
                files.append(path.relative_to(folder))
    return files


def _export_adapter(ref: CheckpointRef, out: Path, base_id: str) -> None:
    """Copy the PEFT adapter, pointing its config at a base model others can find."""
    for rel in _check_adapter_files(ref):
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ref.adapter_dir / rel, out / rel, follow_symlinks=False)
    cfg_path = out / "adapter_config.json"
    cfg = read_json_object(cfg_path)  # copied without links just above; still a file we read
    cfg["base_model_name_or_path"] = base_id
    cfg_path.write_text(json.dumps(cfg, indent=2), encoding="utf-8")


def _push(out: Path, repo: str, private: bool) -> str:
    import os

    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        raise OsmosisError(
            f"--push-to-hub {repo}: this machine is offline (HF_HUB_OFFLINE is set); the "
            f"export is in {out}: push it later with 'huggingface-cli upload {repo} {out}'"
        )
    try:
        from huggingface_hub import HfApi
    except ImportError as exc:
        raise MissingExtraError("--push-to-hub", "trainer", "huggingface_hub") from exc
    api = HfApi()
    try:
        # A new repo is private unless --public: a checkpoint can memorise its training data.
        api.create_repo(repo, private=private, exist_ok=True)
        info = api.upload_folder(folder_path=str(out), repo_id=repo)
    except Exception as exc:  # network, auth and hub errors all end the same way
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise OsmosisError(
            f"--push-to-hub {repo} failed ({first}). The export is in {out}; check the network "
            "and your token ('huggingface-cli login' or HF_TOKEN), then retry with "
            f"'huggingface-cli upload {repo} {out}'"
        ) from exc
    return str(getattr(info, "commit_url", f"https://huggingface.co/{repo}"))


@model_app.command("export")
def export_command(
    checkpoint: Annotated[str, typer.Argument(help="RUN[:STEP], e.g. calc:best or calc:40.")],
    out: Annotated[Path, typer.Argument(help="Folder to write (must be empty or new).")],
    merge: Annotated[
        bool,
        typer.Option("--merge", help="Fold the adapter into the base: a plain model folder."),
    ] = False,
    push_to_hub: Annotated[
        str | None, typer.Option("--push-to-hub", help="Upload to this Hugging Face repo.")
    ] = None,
    public: Annotated[
        bool,
        typer.Option(
            "--public/--private",
            help="With --push-to-hub: create the Hub repo public (default: private).",
        ),
    ] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Write a checkpoint as a PEFT adapter folder, or (--merge) as a merged model."""
    ref = _resolve(checkpoint)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"{out} exists and is not empty; choose a new folder")
    if push_to_hub is not None and push_to_hub.count("/") != 1:
        raise ConfigError(f"--push-to-hub {push_to_hub!r}: use a Hub repo id such as user/name")
    base_id = _EMBEDDED_HUB_ID if ref.base_model == "embedded" else ref.base_model
    _check_adapter_files(ref)
    if merge:
        _require_trainer("osmosis model export --merge")
        from osmosis_ai.runs import resolve_model_path

        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "osmosis_trainer.export",
                "--base",
                resolve_model_path(ref.base_model),
                "--adapter",
                str(ref.adapter_dir),
                "--out",
                str(out),
            ],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            lines = (proc.stderr or proc.stdout).strip().splitlines()
            detail = lines[-1] if lines else f"exit code {proc.returncode}"
            raise OsmosisError(f"merging {ref.label} failed: {detail.removeprefix('error: ')}")
    else:
        _export_adapter(ref, out, base_id)
    (out / "README.md").write_text(_model_card(ref, base_id, merge), encoding="utf-8")
    url = (_push_recorded(ref, out, push_to_hub, not public, merge)
           if push_to_hub is not None else None)
    if json_out:
        state.emit_json(
            {"checkpoint": ref.as_dict(), "out": str(out), "merged": merge, "hub_url": url}
        )
        return
    what = "merged model (loads without peft)" if merge else "PEFT adapter"
    state.console.print(f"exported {ref.label} as a {what} to {out}", markup=False)
    if url:
        state.console.print(f"pushed to {url}")


def _record_deploy(ref: CheckpointRef, host: str, port: int, name: str, engine: str) -> str:
    """Record in the checkpoint that this process serves it (``train info`` and the dashboard
    show it as serving while this process lives; it waits for its server)."""
    from osmosis_ai.runs._published import record_deployment

    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}/v1" if port else f"http://{shown}:<free port>/v1"
    return record_deployment(ref.path, url=url, name=name, engine=engine, pid=os.getpid())


def _end_deploy(ref: CheckpointRef, served: str, code: int) -> None:
    from osmosis_ai.runs._published import record_deployment_end

    record_deployment_end(ref.path, served, code)


def _push_recorded(ref: CheckpointRef, out: Path, repo: str, private: bool, merged: bool) -> str:
    """:func:`_push`, with the upload (or its failure) recorded in the checkpoint."""
    from osmosis_ai.runs._published import record_upload

    try:
        url = _push(out, repo, private)
    except OsmosisError as exc:
        record_upload(ref.path, repo=repo, url=None, private=private, merged=merged,
                      error=str(exc).split(". ")[0])
        raise
    record_upload(ref.path, repo=repo, url=url, private=private, merged=merged)
    return url


def register(app: typer.Typer) -> None:
    """Add the ``model`` command group to the root app."""
    app.add_typer(model_app, name="model")
