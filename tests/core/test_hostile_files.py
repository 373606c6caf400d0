"""Every file the product reads may have been crafted: one bad file never crashes, hangs or
leaks through a reader, and the other runs and evals stay listed.

Each kind of bad file (deep JSON, a huge integer, invalid UTF-8, a FIFO, a link to a file
outside, a 200 MB file, a truncated line) is put in each place a reader opens one (run folder
files, eval folder files, traces, demonstrations, datasets, configs, ``published.json``, the
GGUF cache's digest memo). Each case checks: the reader returns (the test's own timeout bounds
a hang), the answer or error names the bad file, nothing of the file outside shows up, and the
other run or eval is still there.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from osmosis_ai.errors import OsmosisError
from osmosis_ai.eval._records import EvalRecord, EvalRunInfo
from osmosis_ai.runs import create_run_dir

SECRET = "OUTSIDE-SECRET-7f3a"
"""Written only in the file outside the workspace: it must never come back from a reader."""
DEEP = 200_000
DIGITS = 6000

KINDS = ("deep", "huge_int", "bad_utf8", "fifo", "link", "huge", "truncated")


# -- the bad files ------------------------------------------------------------------------------


def _json_value(kind: str) -> bytes:
    if kind == "deep":
        return b"[" * DEEP + b"]" * DEEP
    if kind == "huge_int":
        return b'{"step": ' + b"1" * DIGITS + b"}"
    if kind == "bad_utf8":
        return b'{"name": "\xff\xfe\xc3"}'
    return b'{"name": "cut'  # truncated


def _toml_value(kind: str) -> bytes:
    if kind == "deep":
        return b"x = " + b"[" * DEEP + b"]" * DEEP + b"\n"
    if kind == "huge_int":
        return b"x = " + b"1" * DIGITS + b"\n"
    if kind == "bad_utf8":
        return b'name = "\xff\xfe"\n'
    return b'[training]\nlr = "cut'  # truncated


def plant(path: Path, kind: str, fmt: str, outside: Path) -> None:
    """Replace ``path`` with a bad file of ``kind``; ``fmt``: json, jsonl or toml."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "link":
        path.symlink_to(outside)
    elif kind == "huge":
        with path.open("wb") as fh:
            fh.truncate(200 * 1024 * 1024)  # sparse: 200 MB of NUL bytes, no disk used
    elif fmt == "toml":
        path.write_bytes(_toml_value(kind))
    elif fmt == "jsonl":
        good = b'{"step": 1, "kind": "train", "reward_mean": 0.5}\n'
        tail = _json_value(kind) if kind != "truncated" else b'{"step": 2, "rew'
        path.write_bytes(good + tail + (b"" if kind == "truncated" else b"\n"))
    else:
        path.write_bytes(_json_value(kind))


# -- a workspace with two runs and two eval runs ------------------------------------------------


@dataclass
class Workspace:
    root: Path
    outside: Path

    @property
    def runs(self) -> Path:
        return self.root / "runs"

    @property
    def evals(self) -> Path:
        return self.root / ".osmosis" / "evals"

    def run(self, name: str) -> Path:
        return next(p for p in self.runs.iterdir() if p.name.startswith(f"{name}-"))


def _trace_line(step: int) -> str:
    return (
        json.dumps(
            {
                "step": step,
                "group_id": 0,
                "rollout_id": "r0",
                "sample_id": "main",
                "reward": 1.0,
                "advantage": 0.0,
                "truncated": False,
                "tools": None,
                "sequences": [],
                "messages": [
                    {"role": "user", "content": "2+3?"},
                    {"role": "assistant", "content": "5"},
                ],
            }
        )
        + "\n"
    )


def _make_run(root: Path, name: str, day: int) -> Path:
    run = create_run_dir(root, name, now=datetime(2026, 1, day, 9, 0, 0), model="tiny")
    run.update_status(status="finished", step=1, total_steps=1, created_at=float(day))
    run.config_file.write_text("[training]\nlr = 1e-4\n[evaluation]\npass_threshold = 1.0\n")
    (run.path / "metrics.jsonl").write_text('{"step": 1, "kind": "train", "reward_mean": 0.5}\n')
    (run.path / "heldout.json").write_text('{"model": "x"}')
    ckpt = run.checkpoints / "step_000001"
    (ckpt / "adapter").mkdir(parents=True)
    (ckpt / "trainer_state.pt").write_bytes(b"x")
    (ckpt / "adapter" / "adapter_config.json").write_text('{"base_model_name_or_path": "t"}')
    (ckpt / "checkpoint.json").write_text('{"step": 1, "saved_at": 1.0}')
    (ckpt / "published.json").write_text('{"deployments": [], "hub_uploads": []}')
    (run.path / "traces").mkdir()
    (run.path / "traces" / "step_000001.jsonl").write_text(_trace_line(1))
    return run.path


def _make_eval(root: Path, name: str) -> Path:
    folder = root / name
    (folder / "traces").mkdir(parents=True)
    info = EvalRunInfo(
        config_path="configs/eval.toml",
        config_name="eval",
        rollout_dir="calc",
        entrypoint="main.py",
        dataset="calc.jsonl",
        model="m",
        n=1,
        limit=None,
        pass_threshold=1.0,
        rollout_hash="r",
        dataset_hash="d",
        started_at=name,
        status="completed",
        work_items=1,
    )
    (folder / "run.json").write_text(info.model_dump_json())
    record = EvalRecord(
        row_index=0,
        run_index=0,
        rollout_id="r0",
        sample_id="main",
        status="success",
        reward=1.0,
        passed=True,
        trace="traces/main.json",
    )
    (folder / "results.jsonl").write_text(record.model_dump_json() + "\n")
    (folder / "summary.json").write_text('{"pass_rate": 1.0}')
    (folder / "submit.json").write_text('{"config": "eval"}')
    call = {
        "request_messages": [{"role": "user", "content": "2+3?"}],
        "response_message": {"role": "assistant", "content": "5"},
    }
    (folder / "traces" / "main.json").write_text(json.dumps({"calls": [call]}))
    return folder


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    outside = tmp_path / "outside" / "secret.json"
    outside.parent.mkdir()
    # Valid for every reader, so following the link would show it.
    outside.write_text(
        json.dumps(
            {
                "name": SECRET,
                "status": "finished",
                "step": 1,
                "kind": "train",
                "note": SECRET,
                "pass_rate": SECRET,
                "config": SECRET,
                "calls": [
                    {
                        "request_messages": [{"role": "user", "content": SECRET}],
                        "response_message": {"role": "assistant", "content": SECRET},
                    }
                ],
            }
        )
    )
    root = tmp_path / "ws"
    (root / "configs").mkdir(parents=True)
    _make_run(root / "runs", "good", 1)
    _make_run(root / "runs", "victim", 2)
    _make_eval(root / ".osmosis" / "evals", "good-eval")
    _make_eval(root / ".osmosis" / "evals", "victim-eval")
    monkeypatch.chdir(root)
    return Workspace(root, outside)


def _client(ws: Workspace) -> Any:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from osmosis_ai.dashboard import create_app

    return TestClient(create_app(ws.runs, ws.evals), base_url="http://127.0.0.1")


def _api(ws: Workspace, *urls: str) -> dict[str, Any]:
    client = _client(ws)
    out = {}
    for url in urls:
        reply = client.get(url)
        assert reply.status_code in (200, 404), f"{url}: {reply.status_code} {reply.text[:300]}"
        out[url] = reply.json()
    return out


# -- the readers --------------------------------------------------------------------------------


def read_run_list(ws: Workspace) -> Any:
    """``osmosis train list``, ``train stop OTHER_RUN``'s lookup and ``/api/runs``."""
    from osmosis_ai.runs import find_run, list_runs

    return {
        "train list": [r.summary() for r in list_runs(ws.runs)],
        "stop other": find_run(ws.runs, "good").summary(),
        **_api(ws, "/api/runs"),
    }


def read_run_info(ws: Workspace) -> Any:
    """``osmosis train info`` and ``/api/runs/<id>`` (+ its metrics) of the victim run."""
    from osmosis_ai.runs import describe_run, find_run

    run_id = ws.run("victim").name
    return {
        "train info": describe_run(find_run(ws.runs, run_id)),
        **_api(ws, "/api/runs", f"/api/runs/{run_id}", f"/api/runs/{run_id}/metrics"),
    }


def read_run_traces(ws: Workspace) -> Any:
    """``osmosis dataset from-run`` and the dashboard's trace view."""
    from osmosis_ai.eval._harvest import demos_from_run

    run_id = ws.run("victim").name
    out = ws.root / "demos-run.jsonl"
    try:
        report: Any = demos_from_run(run_id, out, root=ws.runs).as_dict()
    except OsmosisError as exc:
        report = {"error": str(exc)}
    written = out.read_text() if out.exists() else ""
    return {
        "from-run": report,
        "written": written,
        **_api(ws, f"/api/runs/{run_id}/traces", f"/api/runs/{run_id}/traces/1"),
    }


def read_eval_list(ws: Workspace) -> Any:
    """``osmosis eval list``, ``/api/evals`` and ``/api/evals/<name>``."""
    from osmosis_ai.eval._store import list_eval_runs

    return {
        "eval list": [v.as_dict() for v in list_eval_runs(ws.evals)],
        **_api(ws, "/api/evals", "/api/evals/victim-eval"),
    }


def read_eval_trace(ws: Workspace) -> Any:
    """``osmosis dataset from-eval`` on the victim eval run."""
    from osmosis_ai.eval._harvest import demos_from_eval

    out = ws.root / "demos-eval.jsonl"
    try:
        report: Any = demos_from_eval("victim-eval", out, root=ws.evals).as_dict()
    except OsmosisError as exc:
        report = {"error": str(exc)}
    return {"from-eval": report, "written": out.read_text() if out.exists() else ""}


def read_demonstrations(ws: Workspace) -> Any:
    from osmosis_ai.data import load_demonstrations

    try:
        rows, problems = load_demonstrations(ws.root / "demos.jsonl")
    except OsmosisError as exc:
        return {"error": str(exc)}
    return {"rows": [r.messages for r in rows], "problems": [str(p) for p in problems]}


def read_dataset_file(ws: Workspace) -> Any:
    from osmosis_ai.data import validate_dataset

    try:
        return validate_dataset(ws.root / "data.jsonl").model_dump(mode="json")
    except OsmosisError as exc:
        return {"error": str(exc)}


def read_config(ws: Workspace) -> Any:
    from osmosis_ai.config import load_training_config

    try:
        return load_training_config(ws.root / "configs" / "train.toml").model_dump(mode="json")
    except OsmosisError as exc:
        return {"error": str(exc)}


def read_published(ws: Workspace) -> Any:
    from osmosis_ai.runs._published import publish_status

    return publish_status(ws.run("victim") / "checkpoints" / "step_000001")


def read_model_ref(ws: Workspace) -> Any:
    """``--model RUN`` (eval, deploy): the checkpoint and the run's base model."""
    from osmosis_ai.models import resolve_checkpoint

    return resolve_checkpoint(ws.run("victim").name, ws.runs).as_dict()


def read_latest_pointer(ws: Workspace) -> Any:
    """The trainer's ``checkpoints/latest`` on resume: only a ``step_*`` folder beside it."""
    pytest.importorskip("torch")
    from osmosis_trainer.checkpoints import latest_checkpoint

    found = latest_checkpoint(ws.run("victim") / "checkpoints")
    assert found is not None and found.name == "step_000001"
    return {"latest": str(found)}


def read_judge_cache(ws: Workspace) -> Any:
    """An LLM judge's cache file: a bad one costs its entries, never the run."""
    from osmosis_ai.grading import JudgeCache

    return {"entries": len(JudgeCache(ws.root / "judge-cache.jsonl"))}


def read_eval_resume(ws: Workspace) -> Any:
    """``osmosis eval run --resume``: the run's own ``run.json``."""
    from osmosis_ai.eval._run import _previous_info

    try:
        return _previous_info(ws.evals / "victim-eval").model_dump(mode="json")
    except OsmosisError as exc:
        return {"error": str(exc)}


def read_heldout_report(ws: Workspace) -> Any:
    """The held-out report a run wrote (``read_heldout``): unreadable reads as none."""
    from osmosis_ai.eval._heldout import read_heldout

    report = read_heldout(ws.run("victim"))
    return {"report": report.model_dump(mode="json") if report is not None else None}


def read_adapter_config(ws: Workspace) -> Any:
    """The HF engine loading a checkpoint's adapter (``model deploy``, training's engine)."""
    pytest.importorskip("peft")
    from osmosis_ai.serving import EngineError
    from osmosis_trainer.engines._hf_adapter import read_adapter

    adapter = ws.run("victim") / "checkpoints" / "step_000001" / "adapter"
    try:
        read_adapter(str(adapter))
    except EngineError as exc:
        return {"error": str(exc)}
    return {"error": None}


def read_gguf_digest(ws: Workspace) -> Any:
    """The GGUF cache's digest memo only speeds a start up: a bad one is hashed again."""
    pytest.importorskip("torch")
    from osmosis_trainer.gguf_cache import _source_digest

    source = ws.root / "model.gguf"
    digest = _source_digest(source, ws.root / "cache" / "model-x.digest.json")
    assert digest == hashlib.sha256(source.read_bytes()).hexdigest()
    return {"digest": digest}


def _harbor_task(ws: Workspace) -> Any:
    from osmosis_ai.rollout.backend.harbor.tasks import HarborTask

    task = ws.root / "tasks" / "t1"
    (task / "environment").mkdir(parents=True, exist_ok=True)
    if not (task / "environment" / "Dockerfile").exists():
        (task / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    return HarborTask(task)


def read_harbor_task_toml(ws: Workspace) -> Any:
    """A Harbor task's ``task.toml`` (task folders come from datasets others wrote)."""
    try:
        return {"limits": str(_harbor_task(ws).limits())}
    except OsmosisError as exc:
        return {"error": str(exc)}


def read_harbor_instruction(ws: Workspace) -> Any:
    try:
        return {"instruction": _harbor_task(ws).instruction()}
    except OsmosisError as exc:
        return {"error": str(exc)}


def read_rubric_file(ws: Workspace) -> Any:
    from osmosis_ai.grading._base import read_rubric

    try:
        return {"rubric": read_rubric(ws.root / "rubric.md")}
    except ValueError as exc:
        return {"error": str(exc)}


def read_hub_ref(ws: Workspace) -> Any:
    """The HF cache's ``refs/main`` only points at a snapshot: a bad one is ignored."""
    from osmosis_ai.runs._hub import _cached

    found = _cached("org/model", ws.root / "hub")
    return {"snapshot": str(found) if found else None}


@dataclass(frozen=True)
class Place:
    """Where a bad file goes, what format it has there, and which reader opens it."""

    where: Callable[[Workspace], Path]
    fmt: str
    reader: Callable[[Workspace], Any]
    other: str | None = None
    """A name that must still be listed (the other run or eval)."""
    named: bool = True
    """Whether the answer must name the bad file (a cache memo is silently rebuilt instead)."""
    user_named: bool = False
    """A file the user names on the command line: a link there is followed (their choice)."""


def _victim(rel: str) -> Callable[[Workspace], Path]:
    return lambda ws: ws.run("victim") / rel


def _victim_eval(rel: str) -> Callable[[Workspace], Path]:
    return lambda ws: ws.evals / "victim-eval" / rel


def _at(rel: str) -> Callable[[Workspace], Path]:
    return lambda ws: ws.root / rel


PLACES: dict[str, Place] = {
    "run status.json": Place(_victim("status.json"), "json", read_run_list, other="good-"),
    "run metrics.jsonl": Place(_victim("metrics.jsonl"), "jsonl", read_run_info),
    "run config.toml": Place(_victim("config.toml"), "toml", read_run_info),
    "run heldout.json": Place(_victim("heldout.json"), "json", read_run_info),
    "run checkpoint.json": Place(
        _victim("checkpoints/step_000001/checkpoint.json"), "json", read_run_info
    ),
    "run published.json": Place(
        _victim("checkpoints/step_000001/published.json"), "json", read_published
    ),
    "run trace": Place(_victim("traces/step_000001.jsonl"), "jsonl", read_run_traces),
    "eval submit.json": Place(
        _victim_eval("submit.json"), "json", read_eval_list, other="good-eval"
    ),
    "eval run.json": Place(_victim_eval("run.json"), "json", read_eval_list, other="good-eval"),
    "eval summary.json": Place(
        _victim_eval("summary.json"), "json", read_eval_list, other="good-eval"
    ),
    "eval results.jsonl": Place(
        _victim_eval("results.jsonl"), "jsonl", read_eval_list, other="good-eval"
    ),
    "eval trace": Place(_victim_eval("traces/main.json"), "json", read_eval_trace),
    "demonstrations": Place(_at("demos.jsonl"), "jsonl", read_demonstrations, user_named=True),
    "dataset": Place(_at("data.jsonl"), "jsonl", read_dataset_file, user_named=True),
    "config": Place(_at("configs/train.toml"), "toml", read_config, user_named=True),
    "run config.toml for --model RUN": Place(
        _victim("config.toml"), "toml", read_model_ref, named=False
    ),
    "run checkpoints/latest for --model RUN": Place(
        _victim("checkpoints/latest"), "json", read_model_ref, named=False
    ),
    "run checkpoints/latest on resume": Place(
        _victim("checkpoints/latest"), "json", read_latest_pointer, named=False
    ),
    "judge cache": Place(
        _at("judge-cache.jsonl"), "jsonl", read_judge_cache, named=False, user_named=True
    ),
    "eval run.json on --resume": Place(_victim_eval("run.json"), "json", read_eval_resume),
    "run heldout.json report": Place(
        _victim("heldout.json"), "json", read_heldout_report, named=False
    ),
    "checkpoint adapter_config.json": Place(
        _victim("checkpoints/step_000001/adapter/adapter_config.json"),
        "json",
        read_adapter_config,
    ),
    "harbor task.toml": Place(_at("tasks/t1/task.toml"), "toml", read_harbor_task_toml),
    "harbor instruction.md": Place(_at("tasks/t1/instruction.md"), "text", read_harbor_instruction),
    "rubric file": Place(_at("rubric.md"), "text", read_rubric_file, user_named=True),
    "hf cache refs/main": Place(
        _at("hub/models--org--model/refs/main"), "text", read_hub_ref, named=False
    ),
    "gguf digest memo": Place(
        _at("cache/model-x.digest.json"), "json", read_gguf_digest, named=False
    ),
}


def _prepare(ws: Workspace, place: Place) -> None:
    (ws.root / "demos.jsonl").write_text(
        json.dumps(
            {
                "messages": [
                    {"role": "user", "content": "2+3?"},
                    {"role": "assistant", "content": "5"},
                ]
            }
        )
        + "\n"
    )
    (ws.root / "data.jsonl").write_text('{"user_prompt": "2+3?", "ground_truth": "5"}\n')
    (ws.root / "configs" / "train.toml").write_text("[training]\nlr = 1e-4\n")
    (ws.root / "model.gguf").write_bytes(b"GGUF" + bytes(range(256)))


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("place_name", list(PLACES))
def test_a_bad_file_is_one_clear_problem(ws: Workspace, place_name: str, kind: str) -> None:
    place = PLACES[place_name]
    _prepare(ws, place)
    bad = place.where(ws)
    plant(bad, kind, place.fmt, ws.outside)
    answer = place.reader(ws)
    text = json.dumps(answer, default=str)
    if kind == "link" and place.user_named:
        return  # the user named the file: following their link is what they asked for
    assert SECRET not in text, f"{place_name}: the file outside was read through a link"
    if place.other is not None:
        assert place.other in text, f"{place_name}: the other one is no longer listed"
    if place.fmt == "text" and kind in ("deep", "huge_int", "truncated"):
        return  # plain text has no structure to break: brackets and digits are just text
    if place.named:
        assert str(bad) in text, (
            f"{place_name}/{kind}: the answer does not name {bad}: {text[:600]}"
        )


# -- links and paths in eval folders and run traces (issue 41 §3) ------------------------------


def test_a_linked_eval_folder_is_not_listed(ws: Workspace) -> None:
    from osmosis_ai.eval._store import list_eval_runs

    elsewhere = _make_eval(ws.outside.parent, "planted-eval")
    (ws.evals / "linked-eval").symlink_to(elsewhere, target_is_directory=True)
    names = [v.name for v in list_eval_runs(ws.evals)]
    assert names == ["good-eval", "victim-eval"]
    api = _api(ws, "/api/evals", "/api/evals/linked-eval")
    assert [e["name"] for e in api["/api/evals"]["evals"]] == ["victim-eval", "good-eval"]
    assert "detail" in api["/api/evals/linked-eval"]  # 404: not one of the store's eval runs


def _set_trace(ws: Workspace, trace: str) -> None:
    results = ws.evals / "victim-eval" / "results.jsonl"
    record = json.loads(results.read_text())
    results.write_text(json.dumps({**record, "trace": trace}) + "\n")


def test_from_eval_reads_a_trace_only_from_the_eval_runs_traces_folder(ws: Workspace) -> None:
    _set_trace(ws, str(ws.outside))  # an absolute path to a file outside
    answer = json.dumps(read_eval_trace(ws))
    assert SECRET not in answer
    assert "no such trace file" in answer


def test_from_eval_says_the_same_for_a_path_outside_and_a_missing_trace(ws: Workspace) -> None:
    def problem(trace: str) -> str:
        _set_trace(ws, trace)
        report = read_eval_trace(ws)["from-eval"]
        (message,) = report["problems"]
        return str(message).replace(repr(trace), "TRACE")

    up = "../" * 40  # enough to reach / from any temporary folder
    there = "etc/hostname" if Path("/etc/hostname").exists() else "etc/passwd"
    outside = problem(up + there)
    missing = problem("traces/not-there.json")
    absent_outside = problem(up + "etc/no-such-file")
    assert outside == missing == absent_outside, "the error tells whether a file exists"


def test_from_run_does_not_follow_a_linked_traces_folder(ws: Workspace) -> None:
    from osmosis_ai.eval._harvest import demos_from_run

    planted = ws.outside.parent / "traces"
    planted.mkdir()
    (planted / "step_000001.jsonl").write_text(_trace_line(1).replace("2+3?", SECRET))
    traces = ws.run("victim") / "traces"
    for p in traces.iterdir():
        p.unlink()
    traces.rmdir()
    traces.symlink_to(planted, target_is_directory=True)
    out = ws.root / "d.jsonl"
    with pytest.raises(OsmosisError, match="symbolic link") as caught:
        demos_from_run(ws.run("victim").name, out, root=ws.runs)
    assert str(traces) in str(caught.value)
    assert not out.exists() or SECRET not in out.read_text()
    api = _api(ws, f"/api/runs/{ws.run('victim').name}/traces")
    assert next(iter(api.values())) == {"steps": []}


# -- the commands people type ------------------------------------------------------------------

CLI_CASES = {
    "train list": (_victim("status.json"), "json", ["train", "list"], "good-"),
    "train stop OTHER_RUN": (_victim("status.json"), "json", ["train", "stop", "good"], "good-"),
    "train info": (_victim("metrics.jsonl"), "jsonl", ["train", "info", "victim"], None),
    "eval list": (_victim_eval("submit.json"), "json", ["eval", "list"], "good-eval"),
    "eval info": (_victim_eval("summary.json"), "json", ["eval", "info", "victim-eval"], None),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["deep", "huge_int", "fifo", "link"])
@pytest.mark.parametrize("case", list(CLI_CASES))
def test_the_commands_name_the_bad_file_and_go_on(
    ws: Workspace, case: str, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from osmosis_ai.cli._app import main

    where, fmt, argv, other = CLI_CASES[case]
    bad = where(ws)
    plant(bad, kind, fmt, ws.outside)
    code = main(["--plain", *argv])
    out, err = capsys.readouterr()
    text = out + err
    assert "Traceback" not in text and "RecursionError" not in text, text[-2000:]
    assert code in (0, 1), text[-2000:]  # stop: 1, the other run is already finished
    assert SECRET not in text
    if other is not None:
        assert other in text, text[-2000:]
    if case in ("train info", "eval list", "eval info"):
        assert str(bad) in text, text[-2000:]


def test_eval_info_names_a_summary_of_the_wrong_shape(
    ws: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    from osmosis_ai.cli._app import main

    summary = ws.evals / "victim-eval" / "summary.json"
    summary.write_text('{"pass_rate": "all of them", "reward": [1]}')
    assert main(["--plain", "eval", "info", "victim-eval"]) == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert f"skipped {summary}: not an eval summary" in out
