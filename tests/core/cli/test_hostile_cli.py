"""Careless and hostile CLI input (issue 18, items 14-15): one clear error, never a traceback,
and no name that leads outside its folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from osmosis_ai.config import load_training_config
from osmosis_ai.errors import ConfigError
from osmosis_ai.runs._store import create_run_dir
from osmosis_ai.templates import TemplateError, validate_rollout_name
from tests.core.cli.conftest import RunCli

EXPERIMENT = """\
[experiment]
rollout = "calc"
entrypoint = "{entry}"
model_path = "openai/gpt-4o-mini"
dataset = "calc"
"""


@pytest.mark.parametrize(
    "argv",
    [
        ("template", "create"),  # missing argument
        ("--bogus",),  # unknown option
        ("template", "list", "--nope"),
        ("serve", "-m", "server:agent_loop", "-p", "not-a-port"),  # bad option type
    ],
)
def test_usage_errors_print_usage_not_a_traceback(run_cli: RunCli, argv: tuple[str, ...]) -> None:
    result = run_cli(*argv)
    assert result.code == 2
    text = result.out + result.err
    assert "Error:" in text and "Traceback" not in text


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("huge.jsonl", '{"user_prompt": "hi", "ground_truth": ' + "9" * 5000 + "}\n", "4,300 digits"),
        ("deep.jsonl", '{"user_prompt": "hi", "x": ' + "[" * 50_000 + "]" * 50_000 + "}\n",
         "nested too deeply"),
        ("deep.json", '[{"user_prompt": "hi", "x": ' + "[" * 50_000 + "]" * 50_000 + "}]",
         "nested too deeply"),
    ],
)
def test_unreadable_dataset_values_are_row_errors(
    run_cli: RunCli, tmp_path: Path, name: str, content: str, message: str
) -> None:
    path = tmp_path / name
    path.write_text(content)
    result = run_cli("dataset", "validate", str(path))
    assert result.code == 1
    assert message in result.out + result.err and "Traceback" not in result.out + result.err


def test_a_damaged_parquet_file_is_one_located_error(run_cli: RunCli, tmp_path: Path) -> None:
    from tests.core.data.test_validate import corrupt_parquet

    path = corrupt_parquet(tmp_path / "d.parquet")
    result = run_cli("dataset", "validate", str(path))
    text = result.out + result.err
    assert result.code == 1 and "Traceback" not in text
    assert "row group 1 (rows 100..199)" in text and "Corrupt snappy" in text


def _workspace(tmp_path: Path) -> Path:
    (tmp_path / "configs" / "training").mkdir(parents=True)
    (tmp_path / "rollouts" / "calc").mkdir(parents=True)
    (tmp_path / "rollouts" / "calc" / "main.py").write_text("# entry\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "calc.jsonl").write_text('{"user_prompt": "1+1"}\n')
    return tmp_path


def test_broken_toml_files_are_one_config_error(run_cli: RunCli, tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    binary = ws / "configs" / "training" / "bin.toml"
    binary.write_bytes(b'[experiment]\nrollout = "\xff\xfe"\n')
    deep = ws / "configs" / "training" / "deep.toml"
    deep.write_text("x = " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_training_config(binary)
    with pytest.raises(ConfigError, match="nested too deeply"):
        load_training_config(deep)
    for path in (binary, deep):
        result = run_cli("validate", str(path))
        assert result.code == 1 and "Traceback" not in result.out + result.err


@pytest.mark.parametrize("name", ["calc\n", "calc/x", "../calc", "calc\x00"])
def test_rollout_names_with_newlines_or_separators_are_refused(name: str) -> None:
    with pytest.raises(TemplateError):
        validate_rollout_name(name)


@pytest.mark.parametrize("name", ["../../x", "/tmp/abs", "a/b", "x\n", ".hidden", ""])
def test_run_names_cannot_leave_the_runs_folder(tmp_path: Path, name: str) -> None:
    root = tmp_path / "runs"
    with pytest.raises(ConfigError, match="run name"):
        create_run_dir(root, name)
    assert not any(tmp_path.rglob("*-2*"))  # nothing created anywhere
    assert create_run_dir(root, "ok-name").path.parent == root


@pytest.mark.parametrize("entry", ["../../evil.py", "/etc/evil.py", "sub/../../evil.py"])
def test_entrypoint_outside_the_rollout_folder_is_refused(tmp_path: Path, entry: str) -> None:
    ws = _workspace(tmp_path)
    path = ws / "configs" / "training" / "x.toml"
    path.write_text(EXPERIMENT.format(entry=entry))
    with pytest.raises(ConfigError, match="entrypoint"):
        load_training_config(path).entrypoint_path()


def test_entrypoint_symlinked_outside_the_rollout_folder_is_refused(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    (tmp_path / "evil.py").write_text("raise SystemExit('ran')\n")
    (ws / "rollouts" / "calc" / "link.py").symlink_to(tmp_path / "evil.py")
    path = ws / "configs" / "training" / "x.toml"
    path.write_text(EXPERIMENT.format(entry="link.py"))
    with pytest.raises(ConfigError, match="outside the rollout folder"):
        load_training_config(path).entrypoint_path()


MARKUP = "x[/bold] [link=https://evil.example]click[/link] [red]y"
"""Rich markup in a crafted folder's fields: an unmatched closing tag made the listing raise
(one bad run hid every other), the rest would have styled or linked the terminal."""


def test_markup_in_crafted_run_and_eval_fields_is_shown_as_text(
    run_cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from osmosis_ai.eval._metrics import EvalSummary, RewardStats
    from osmosis_ai.eval._records import EvalRunInfo

    monkeypatch.chdir(tmp_path)
    run = create_run_dir(tmp_path / "runs", "crafted")
    run.update_status(status="failed", phase=MARKUP, rollout=MARKUP, model=MARKUP,
                      dataset=MARKUP, error=MARKUP)
    ckpt = run.checkpoints / "step_000001"
    (ckpt / "adapter").mkdir(parents=True)
    (ckpt / "trainer_state.pt").write_bytes(b"x")
    (ckpt / "checkpoint.json").write_text('{"step": 1}')
    (ckpt / "adapter" / "adapter_config.json").write_text(
        '{"base_model_name_or_path": "' + MARKUP + '"}'
    )
    other = create_run_dir(tmp_path / "runs", "plain")
    folder = tmp_path / ".osmosis" / "evals" / "crafted"
    folder.mkdir(parents=True)
    info = EvalRunInfo(
        config_path="configs/eval.toml", config_name=MARKUP, rollout_dir="calc",
        entrypoint="main.py", dataset="calc.jsonl", model=MARKUP, n=1, limit=None,
        pass_threshold=1.0, rollout_hash="r", dataset_hash="d", started_at=MARKUP,
        status="completed", work_items=1,
    )
    (folder / "run.json").write_text(info.model_dump_json())
    summary = EvalSummary(
        samples=1, success=0, failed=1, skipped=0, pass_threshold=1.0, passed=0, pass_rate=0.0,
        reward=RewardStats(), pass_at_k={MARKUP: 0.0}, failures_by_reason={MARKUP: 1},
        failure_examples={MARKUP: MARKUP},
    )
    (folder / "summary.json").write_text(summary.model_dump_json())
    for argv in (("train", "list"), ("train", "info", "crafted"), ("eval", "list"),
                 ("eval", "info", "crafted"), ("model", "list")):
        result = run_cli(*argv)
        text = result.out + result.err
        assert "Traceback" not in text, argv
        assert result.code in (0, 1), (argv, text)
        flat = " ".join(text.split())  # tables wrap long cells
        assert "[link=https://evil.example]" in flat.replace(" ", "") or "[/bold]" in flat, argv
    assert other.run_id in run_cli("train", "list").out
