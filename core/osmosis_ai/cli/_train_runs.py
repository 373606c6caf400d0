"""``osmosis train list / info / logs / stop``: read and steer runs through the run store.

Fast: nothing here imports torch or the trainer.
"""

from __future__ import annotations

import codecs
import json
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from osmosis_ai.console import state
from osmosis_ai.errors import ConfigError, UnreadableFileError
from osmosis_ai.safe_io import open_file

__all__ = ["register"]

_RunsDir = Annotated[
    Path | None,
    typer.Option(
        "--runs-dir",
        help="The runs folder (default: $OSMOSIS_RUNS_DIR, else runs/ of this workspace).",
    ),
]
_LOG_POLL_S = 0.3
_LOG_CHUNK_BYTES = 1 << 20


def _root(runs_dir: Path | None) -> Path:
    from osmosis_ai.runs import workspace_runs_root

    return runs_dir if runs_dir is not None else workspace_runs_root()


def _age(created: Any) -> str:
    if not isinstance(created, int | float):
        return "-"
    s = max(0, int(time.time() - created))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s // size}{unit}"
    return f"{s}s"


def list_runs(
    status: Annotated[
        str | None, typer.Option("--status", help="Only runs with this status.")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    runs_dir: _RunsDir = None,
    limit: Annotated[
        int, typer.Option("--limit", min=1, help="Show the newest N runs (default 50).")
    ] = 50,
    show_all: Annotated[bool, typer.Option("--all", help="Show every run (no --limit).")] = False,
) -> None:
    """List runs: name, status, phase, rollout, model, dataset, step/total, last reward, age."""
    from osmosis_ai.runs import STATUSES
    from osmosis_ai.runs import list_runs as read_runs

    if status is not None and status not in STATUSES:
        raise ConfigError(f"--status {status!r}: not a run status; use one of {', '.join(STATUSES)}")
    root = _root(runs_dir)
    runs = read_runs(root, status=[status] if status else None)  # oldest first
    hidden = 0 if show_all else max(0, len(runs) - limit)
    runs = runs[hidden:]
    if hidden and not json_out:
        state.warn(f"showing the newest {len(runs)} of {len(runs) + hidden} runs; --all shows all")
    if json_out:
        state.emit_json([r.summary() for r in runs])
        return
    if not runs:
        where = f" with status {status}" if status else ""
        state.console.print(f"no runs{where} under {root}", highlight=False, markup=False)
        return
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("run", "status", "phase", "rollout", "model", "dataset", "step", "reward",
                   "age"):
        table.add_column(column, no_wrap=column != "model")
    colours = {"running": "cyan", "finished": "green", "failed": "red", "crashed": "red",
               "stopped": "yellow", "killed": "yellow", "pending": "blue"}
    for r in runs:
        reward = r.last_reward
        table.add_row(  # names and fields come from run folders: escaped, never markup
            escape(r.run_id),
            "[red]unreadable[/]" if r.unreadable else
            f"[{colours.get(r.status, 'white')}]{escape(r.status)}[/]",
            escape(str(r.phase)),
            escape(str(r.rollout or "-")),
            escape(str(r.model or "-")),
            escape(str(r.dataset or "-")),
            f"{r.step}/{r.total_steps if r.total_steps is not None else '?'}",
            f"{reward:.3f}" if reward is not None else "-",
            _age(r.created_at),
        )
    state.console.print(table)
    for r in runs:
        if r.unreadable:
            state.warn(f"run {r.run_id} is unreadable: {r.unreadable}")


def info(
    run_name: Annotated[str, typer.Argument(help="Run name or id (see 'osmosis train list').")],
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Also write the details as JSON here.")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    runs_dir: _RunsDir = None,
) -> None:
    """Show a run: config, progress, latest and best reward, metrics, checkpoints, error."""
    from osmosis_ai.runs import describe_run, find_run

    details = describe_run(find_run(_root(runs_dir), run_name))
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps(details, indent=2, default=str) + "\n")
    if json_out:
        state.emit_json(details)
        return
    _print_info(details)
    if output is not None:
        state.console.print(f"written to {output}", highlight=False, markup=False)


def _num(value: Any, spec: str = ".3f") -> str:
    return format(value, spec) if isinstance(value, int | float) else "-"


def _print_info(d: dict[str, Any]) -> None:
    con = state.console
    status = "unreadable" if d.get("unreadable") else d["status"]
    head = f"{status} · phase {d['phase']}" + (f" ({d['activity']})" if d.get("activity") else "")
    con.print(f"[bold]{escape(str(d['run_id']))}[/]  {escape(head)}", highlight=False)
    for line in [*_run_lines(d), *_phase_lines(d), *_outcome_lines(d)]:
        con.print(line, highlight=False, markup=False)
    if d["metrics_summary"]:
        con.print("metrics    first → last (min..max)", highlight=False)
        for key, s in d["metrics_summary"].items():
            con.print(
                f"  {key:<17} {_num(s['first'])} → {_num(s['last'])} "
                f"({_num(s['min'])}..{_num(s['max'])})", highlight=False, markup=False,
            )
    if d["checkpoints"]:
        con.print("checkpoints", highlight=False)
        for c in d["checkpoints"]:
            where = "warm  " if Path(str(c["path"])).name == "warm" else f"{c['step']:<6}"
            con.print(f"  step {where} reward {_num(c['reward'])}  {c['path']}"
                      + _published(c), highlight=False, markup=False)
    else:
        con.print("checkpoints none", highlight=False)
    if d.get("error"):
        con.print(f"[red]error[/]      {escape(str(d['error']))}", highlight=False)
    for problem in d.get("problems") or []:  # files of the run left out (safe_io)
        con.print(f"skipped    {problem}", highlight=False, markup=False)
    con.print(f"log        {d['log_file']}", highlight=False, markup=False)


def _run_lines(d: dict[str, Any]) -> list[str]:
    """What the run is: its folder, rollout, model, dataset, progress, reward and code."""
    p = d["progress"]
    total = p["total_steps"] if p["total_steps"] is not None else "?"
    lines = [
        f"path       {d['path']}",
        f"rollout    {d['rollout']} · model {d['model']} · dataset {d['dataset']}",
        f"progress   step {p['current_step']}/{total}"
        + (f" · {d['samples']} samples" if d.get("samples") is not None else ""),
        f"reward     latest {_num(d['latest_reward'])}"
        + (f" · best {_num(d['best_reward']['reward'])} at step {d['best_reward']['step']}"
           if d["best_reward"] else "")
        + (f" · improvement {_num(d['improvement']['change'], '+.3f')}"
           if d.get("improvement") else ""),
    ]
    if d.get("unreadable"):
        lines.insert(0, f"unreadable {d['unreadable']}")
    code = d.get("code") or {}
    if code.get("revision"):
        lines.append(
            f"code       {code['revision'][:12]}"
            + (" (HEAD, git sync)" if code.get("synced") else
               " (pinned)" if code.get("pinned") else " (working tree)")
            + (" · dirty tree at submit" if code.get("dirty") else "")
        )
        left_out = code.get("left_out")
        if code.get("synced") and isinstance(left_out, list) and left_out:
            lines.append(f"left out   {len(left_out)} uncommitted file(s): "
                         + ", ".join(str(f) for f in left_out[:5])
                         + (" ..." if len(left_out) > 5 else ""))
    return lines


def _phase_lines(d: dict[str, Any]) -> list[str]:
    """Where it stands: the warm start, the worker's heartbeat, the Ray cluster."""
    lines: list[str] = []
    warm = d.get("warm_start")
    if isinstance(warm, dict):  # [warm_start]: the supervised phase before RL step 1
        loss, acc = warm.get("loss") or {}, warm.get("token_accuracy") or {}
        lines.append(
            f"warm start {warm.get('steps')} steps · loss {_num(loss.get('first'))} → "
            f"{_num(loss.get('last'))} · token accuracy {_num(acc.get('first'), '.0%')} → "
            f"{_num(acc.get('last'), '.0%')}"
        )
    beat = d.get("heartbeat_age_s")
    if d["status"] in ("pending", "running") and beat is not None:
        lines.append(f"worker     pid {d.get('pid')} · last heartbeat {beat:.0f} s ago")
    cluster = d.get("cluster")
    if isinstance(cluster, dict):  # [cluster] runs: Ray workers/engines still serving
        lines.append(
            f"cluster    {cluster.get('address')} · {cluster.get('workers')} rollout workers"
            + (f" ({cluster['workers_lost']} lost)" if cluster.get("workers_lost") else "")
            + (f" · {cluster['engines']} engines"
               if cluster.get("engines") or cluster.get("engines_lost") else "")
            + (f" ({cluster['engines_lost']} lost)" if cluster.get("engines_lost") else "")
        )
    return lines


def _outcome_lines(d: dict[str, Any]) -> list[str]:
    """How it ended: the held-out comparison and the duration."""
    from osmosis_ai.learning import held_out_of, heldout_lines

    lines: list[str] = []
    held = d.get("heldout")
    reward = held_out_of(held) if isinstance(held, dict) else None
    if reward is not None:
        lines.append(f"held-out   {reward.rows} rows, {reward.reward_text()}")
    elif d.get("heldout_error"):
        lines.append(f"held-out   did not finish: {d['heldout_error']}")
    lines.extend(heldout_lines(held))  # base / warm start / trained: pass rate and tool use
    if d.get("duration_s") is not None:
        lines.append(f"duration   {d['duration_s'] / 60:.1f} min")
    return lines


def _published(c: dict[str, Any]) -> str:
    """`` · serving at URL · on the Hub: user/name`` for a checkpoint that was published."""
    out = ""
    dep, hub = c.get("deployment"), c.get("hub")
    if isinstance(dep, dict):
        out += f" · {'serving at' if dep['state'] == 'serving' else 'was served at'} {dep['url']}"
    if isinstance(hub, dict):
        out += (f" · on the Hub: {hub['repo']}" if hub["state"] == "uploaded"
                else f" · Hub upload failed ({hub['repo']})")
    return out


def logs(
    run_name: Annotated[str, typer.Argument(help="Run name or id.")],
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing until the run ends.")
    ] = False,
    runs_dir: _RunsDir = None,
) -> None:
    """Print a run's log (its worker's output); --follow keeps printing while it runs."""
    from osmosis_ai.runs import TERMINAL_STATUSES, find_run, load_run, process_alive

    record = find_run(_root(runs_dir), run_name)
    path = record.log_file
    if not path.exists() and not (follow and record.live):
        raise ConfigError(f"run {record.run_id} has no log yet ({path} does not exist)")
    offset = 0
    text = codecs.getincrementaldecoder("utf-8")(errors="replace")  # a cut keeps its character
    while True:
        offset = _print_log_from(path, record.path, offset, text)
        if not follow:
            break
        current = load_run(record.path)
        ended = current is None or current.status in TERMINAL_STATUSES or current.status == "unknown"
        # The worker prints its last lines after recording its outcome: wait for its exit.
        if ended and (current is None or not process_alive(current.raw.get("worker") or {})):
            if path.exists() and path.stat().st_size > offset:
                continue  # one last read
            break
        time.sleep(_LOG_POLL_S)
    sys.stdout.write(text.decode(b"", final=True))


def _print_log_from(
    path: Path, run_path: Path, offset: int, text: codecs.IncrementalDecoder
) -> int:
    """Print the log from byte ``offset`` on, in bounded chunks; the offset reached. The log is
    run-folder data: a FIFO, a device or a link there is refused (UnreadableFileError), never
    read (a link to /dev/zero would fill memory; a FIFO would block)."""
    try:
        fh = open_file(path, under=run_path)
    except UnreadableFileError as exc:
        if exc.missing:  # not written yet (--follow on a starting run)
            return offset
        raise
    with fh:
        fh.seek(offset)
        while chunk := fh.read(_LOG_CHUNK_BYTES):
            offset += len(chunk)
            sys.stdout.write(text.decode(chunk))
        sys.stdout.flush()
    return offset


def stop(
    run_name: Annotated[str, typer.Argument(help="Run name or id.")],
    wait: Annotated[
        bool, typer.Option("--wait", help="Wait until the run has stopped.")
    ] = False,
    runs_dir: _RunsDir = None,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Do not ask for confirmation on a terminal.")
    ] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Stop a run: it finishes its current step, saves a checkpoint and ends as stopped."""
    from osmosis_ai.runs import find_run, wait_for_status

    record = find_run(_root(runs_dir), run_name)
    if record.unreadable:
        raise ConfigError(f"run {record.run_id} is unreadable ({record.unreadable}); no worker "
                          "of it can be told to stop. Fix status.json or delete the folder")
    if not record.live:
        raise ConfigError(f"run {record.run_id} is already {record.status}; nothing to stop")
    if not (yes or json_out) and _interactive():
        typer.confirm(f"stop run {record.run_id} (step {record.step})?", abort=True)
    record.run_dir.request_stop()
    final = wait_for_status(record.path, lambda r: not r.live) if wait else None
    if json_out:
        state.emit_json({
            "run": record.run_id, "stop_requested": True,
            "status": final.status if final else record.status,
            "step": final.step if final else record.step,
        })
        return
    state.console.print(
        f"stop requested for {record.run_id}: it finishes its current step, saves a "
        "checkpoint and ends as stopped", highlight=False, markup=False,
    )
    if final is not None:
        state.console.print(f"{final.run_id}: {final.status} at step {final.step}",
                            highlight=False, markup=False)


def _interactive() -> bool:
    """A person at a terminal, who can answer a question (never in pipes, CI or tests)."""
    return sys.stdin.isatty() and state.console.is_terminal


def register(train_app: typer.Typer) -> None:
    train_app.command("list")(list_runs)
    train_app.command("info")(info)
    train_app.command("logs")(logs)
    train_app.command("stop")(stop)
