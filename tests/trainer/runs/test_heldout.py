"""``[heldout]``: a finished run compares its last checkpoint with the base model on held-out rows.

A real worker trains a tiny model for 2 steps, then runs the paired eval (both models served by
the HF engine); the end screen, ``heldout.json`` and ``train info`` carry the comparison.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from osmosis_ai.cli._app import main
from osmosis_ai.runs import describe_run, find_run
from tests.trainer.runs.workspace import make_workspace


def _eos(model_dir: Path) -> int:
    from osmosis_trainer.models import load_model

    return int(load_model(str(model_dir)).tokenizer.eos_token_id)


def test_a_finished_run_compares_its_checkpoint_with_the_base_on_heldout_rows(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    eos = _eos(tiny_model_dir)
    ws = tmp_path / "ws"
    config = make_workspace(ws, str(tiny_model_dir), eos_id=eos, rows=8)
    with open(ws / "data" / "even_heldout.jsonl", "w") as fh:
        for i in range(5):
            fh.write(json.dumps({"user_prompt": f"What is {i} * 3?", "ground_truth": str(3 * i),
                                 "eos_id": eos}) + "\n")
    (ws / "configs" / "eval").mkdir()
    (ws / "configs" / "eval" / "even.toml").write_text(
        f'[experiment]\nrollout = "even"\nentrypoint = "main.py"\nmodel_path = "{tiny_model_dir}"\n'
        'dataset = "data/even.jsonl"\n\n[sampling]\nmax_tokens = 8\n'
    )
    config.write_text(
        config.read_text()
        + '\n[heldout]\neval_config = "configs/eval/even.toml"\n'
        'dataset = "data/even_heldout.jsonl"\nn = 2\n'
    )
    monkeypatch.chdir(ws)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["train", "submit", str(config)]) == 0
    text = out.getvalue()
    line = re.search(
        r"^held-out \(5 rows\) mean reward: base (\d\.\d{3}) → trained (\d\.\d{3}) \(([+-]\d\.\d{3}), 95% CI "
        r"\[[+-]\d\.\d{3}, [+-]\d\.\d{3}\]: (better|worse|no clear change)\)$", text, re.M,
    )
    assert line is not None, text
    run = find_run(ws / "runs", "even")
    saved = json.loads((run.path / "heldout.json").read_text())
    assert saved["rows"] == 5 and saved["candidate"] == f"{run.run_id}:2"
    assert float(line.group(3)) == pytest.approx(saved["diff"], abs=1e-3)
    # Both eval runs sit in the run folder: 5 rows x 2 samples each.
    for half in (run.path / "heldout", run.path / "heldout" / "baseline"):
        assert len((half / "results.jsonl").read_text().splitlines()) == 10
    details = describe_run(run)
    assert details["heldout"]["diff"] == saved["diff"] and details["heldout_error"] is None
    capsys.readouterr()
    assert main(["train", "info", run.run_id]) == 0
    assert re.search(r"^held-out   5 rows, mean reward: base \d\.\d{3} → trained", capsys.readouterr().out,
                     re.M)


def test_a_run_with_a_warm_start_reports_base_warm_and_trained(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tests.trainer.warm_start.test_warm_start_job import _demo

    eos = _eos(tiny_model_dir)
    ws = tmp_path / "ws"
    config = make_workspace(ws, str(tiny_model_dir), eos_id=eos, rows=4)
    (ws / "data" / "demos.jsonl").write_text("".join(json.dumps(_demo(i)) + "\n" for i in range(4)))
    with open(ws / "data" / "even_heldout.jsonl", "w") as fh:
        for i in range(3):
            fh.write(json.dumps({"user_prompt": f"What is {i} * 3?", "ground_truth": str(3 * i),
                                 "eos_id": eos}) + "\n")
    (ws / "configs" / "eval").mkdir()
    (ws / "configs" / "eval" / "even.toml").write_text(
        f'[experiment]\nrollout = "even"\nentrypoint = "main.py"\nmodel_path = "{tiny_model_dir}"\n'
        'dataset = "data/even.jsonl"\n\n[sampling]\nmax_tokens = 8\n'
    )
    text = re.sub(r"max_steps = \d+", "max_steps = 1", config.read_text())
    if "max_steps" not in text:
        text = text.replace("[training]\n", "[training]\nmax_steps = 1\n", 1)
    config.write_text(
        text
        + '\n[warm_start]\ndataset = "data/demos.jsonl"\nepochs = 1\nlr = 1e-3\nbatch_size = 2\n'
        '\n[heldout]\neval_config = "configs/eval/even.toml"\n'
        'dataset = "data/even_heldout.jsonl"\nn = 2\n'
    )
    monkeypatch.chdir(ws)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["train", "submit", str(config)]) == 0
    text = out.getvalue()
    run = find_run(ws / "runs", "even")
    saved = json.loads((run.path / "heldout.json").read_text())
    assert [m["role"] for m in saved["models"]] == ["base", "warm", "trained"]
    assert saved["models"][1]["model"].endswith(":warm")
    assert saved["pass_vs_warm"]["measure"] == "pass" and saved["pass_vs_warm"]["rows"] == 3
    assert saved["pass_vs_base"]["rows"] == 3 and saved["measure"] == "reward"
    # The warm start's eval sits beside the other two: 3 rows x 2 samples.
    assert len((run.path / "heldout" / "warm" / "results.jsonl").read_text().splitlines()) == 6
    for shown in (text, _info(run.run_id, capsys)):
        assert re.search(r"^  warm start +\d\.\d{3} +\d+% +\d\.\d{2} +\d\.\d{2}$", shown, re.M), shown
        assert "trained vs warm start: pass rate " in shown


def _info(run_id: str, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert main(["train", "info", run_id]) == 0
    return capsys.readouterr().out


def test_each_named_heldout_file_is_its_own_block_and_report(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    eos = _eos(tiny_model_dir)
    ws = tmp_path / "ws"
    config = make_workspace(ws, str(tiny_model_dir), eos_id=eos, rows=4)
    for name, count in (("times", 3), ("plus", 2)):
        with open(ws / "data" / f"even_{name}.jsonl", "w") as fh:
            for i in range(count):
                question = f"What is {i} * 3?" if name == "times" else f"What is {i} + 3?"
                fh.write(json.dumps({"user_prompt": question, "ground_truth": str(3 * i),
                                     "eos_id": eos}) + "\n")
    (ws / "configs" / "eval").mkdir()
    (ws / "configs" / "eval" / "even.toml").write_text(
        f'[experiment]\nrollout = "even"\nentrypoint = "main.py"\nmodel_path = "{tiny_model_dir}"\n'
        'dataset = "data/even.jsonl"\n\n[sampling]\nmax_tokens = 8\n'
    )
    text = re.sub(r"max_steps = \d+", "max_steps = 1", config.read_text())
    if "max_steps" not in text:
        text = text.replace("[training]\n", "[training]\nmax_steps = 1\n", 1)
    config.write_text(
        text + '\n[heldout]\neval_config = "configs/eval/even.toml"\nn = 1\n'
        '[heldout.datasets]\ntimes = "data/even_times.jsonl"\nplus = "data/even_plus.jsonl"\n'
    )
    monkeypatch.chdir(ws)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["train", "submit", str(config)]) == 0
    run = find_run(ws / "runs", "even")
    saved = json.loads((run.path / "heldout.json").read_text())
    # The first file's report is the top level (what one-file readers find), the next in sets.
    assert (saved["name"], saved["dataset"], saved["rows"]) == ("times", "even_times.jsonl", 3)
    assert [(s["name"], s["rows"]) for s in saved["sets"]] == [("plus", 2)]
    assert [m["role"] for m in saved["sets"][0]["models"]] == ["base", "trained"]
    for name, rows in (("times", 3), ("plus", 2)):
        folder = run.path / "heldout" / name
        for half in (folder, folder / "baseline"):
            assert len((half / "results.jsonl").read_text().splitlines()) == rows
    for shown in (out.getvalue(), _info(run.run_id, capsys)):
        assert "held-out times (even_times.jsonl), 3 rows:" in shown, shown
        assert "held-out plus (even_plus.jsonl), 2 rows:" in shown, shown
        assert shown.index("held-out times (") < shown.index("held-out plus (")
    _each_model_loads_once(config, run.path, run.run_id, saved, monkeypatch)


def _each_model_loads_once(
    config: Path, run_path: Path, run_id: str, saved: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The held-out evals again, in this process: each model is loaded once and runs both files
    on that one engine (before, once per file), and the report reads as the worker's did."""
    import osmosis_ai.eval._heldout as heldout_module
    from osmosis_ai.config import load_training_config
    from osmosis_ai.eval import plan_heldout, run_heldout
    from osmosis_ai.eval._run import default_endpoint as real_endpoint

    opened: list[str] = []

    def counting(model: str, sampling: dict[str, Any], **kw: Any) -> Any:
        opened.append(model)
        return real_endpoint(model, sampling, **kw)

    monkeypatch.setattr(heldout_module, "default_endpoint", counting)
    shutil.rmtree(run_path / "heldout")
    plan = plan_heldout(load_training_config(config))
    assert plan is not None
    report = asyncio.run(run_heldout(plan, run_path, run_id))
    assert len(opened) == 2, opened  # the trained checkpoint and its base model
    assert [(s.name, s.rows) for s in report.each_set()] == [("times", 3), ("plus", 2)]
    assert [m.role for m in report.sets[0].models] == [
        m["role"] for m in saved["sets"][0]["models"]
    ]
