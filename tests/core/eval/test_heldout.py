"""``[heldout]`` is checked when the config is read, before any training: one clear line each."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from osmosis_ai.config import load_training_config
from osmosis_ai.errors import ConfigError
from osmosis_ai.eval import plan_heldout
from osmosis_ai.templates import create_from_template


def _without_heldout(text: str) -> str:
    """The template's training config without its own ``[heldout]`` (the last section)."""
    return text.split("\n[heldout]\n")[0]


def _config(ws: Path, heldout: str, extra: str = "") -> Path:
    path = ws / "configs" / "training" / "calc.toml"
    path.write_text(_without_heldout(path.read_text()) + extra + "\n[heldout]\n" + heldout)
    return path


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    create_from_template("strands", "calc", tmp_path)
    return tmp_path


def test_a_valid_section_resolves_against_the_workspace(ws: Path) -> None:
    cfg = load_training_config(_config(
        ws, 'eval_config = "configs/eval/calc.toml"\ndataset = "data/calc_heldout.jsonl"\nn = 4\n'
    ))
    plan = plan_heldout(cfg)
    assert plan is not None and plan.n == 4
    assert plan.eval_config == ws / "configs/eval/calc.toml"
    assert plan.dataset == ws / "data/calc_heldout.jsonl"


def test_no_section_means_no_heldout_eval(ws: Path) -> None:
    path = ws / "configs" / "training" / "calc.toml"
    path.write_text(_without_heldout(path.read_text()))
    assert plan_heldout(load_training_config(path)) is None


def test_the_quick_start_compares_on_its_own_heldout_rows(ws: Path) -> None:
    plan = plan_heldout(load_training_config(ws / "configs/training/calc.toml"))
    assert plan is not None and plan.dataset == ws / "data/calc_heldout.jsonl"
    assert len(plan.dataset.read_text().splitlines()) >= 24


def test_the_models_run_as_many_rollouts_at_once_as_a_training_step(ws: Path) -> None:
    plan = plan_heldout(load_training_config(ws / "configs/training/calc.toml"))
    assert plan is not None and plan.concurrency == 4 * 8  # rollout_batch_size x samples
    eval_toml = ws / "configs/eval/calc.toml"  # the eval config's own setting wins
    eval_toml.write_text(eval_toml.read_text().replace("[evaluation]\n", "[evaluation]\nconcurrency = 3\n"))
    plan = plan_heldout(load_training_config(ws / "configs/training/calc.toml"))
    assert plan is not None and plan.concurrency == 3


@pytest.mark.parametrize(
    ("heldout", "extra", "message"),
    [
        ('eval_config = "configs/eval/nope.toml"\n', "",
         r"\[heldout\]\.eval_config = 'configs/eval/nope.toml': no such file"),
        ('eval_config = "configs/eval/calc.toml"\ndataset = "data/missing.jsonl"\n', "",
         r"\[heldout\]\.dataset = 'data/missing.jsonl': no such file"),
        ('eval_config = "configs/eval/calc.toml"\ndataset = "data/calc.jsonl"\n', "",
         r"\[heldout\]\.dataset is the training dataset"),
        ('eval_config = "configs/eval/calc.toml"\ndataset = "data/calc_heldout.jsonl"\n',
         '\n[checkpoints]\noutput_dir = "elsewhere"\n', r"drop output_dir"),
        ('eval_config = "configs/eval/calc.toml"\n[heldout.datasets]\nnew = "data/missing.jsonl"\n',
         "", r"\[heldout\]\.datasets\.new = 'data/missing.jsonl': no such file"),
        ('eval_config = "configs/eval/calc.toml"\n[heldout.datasets]\ntrain = "data/calc.jsonl"\n',
         "", r"\[heldout\]\.datasets\.train is the training dataset"),
    ],
)
def test_mistakes_name_the_field_and_the_fix(
    ws: Path, heldout: str, extra: str, message: str
) -> None:
    path = ws / "configs" / "training" / "calc.toml"
    text = path.read_text()
    if extra and "[checkpoints]" in text:
        text = text.replace("[checkpoints]\n", '[checkpoints]\noutput_dir = "elsewhere"\n')
        extra = ""
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        plan_heldout(load_training_config(_config(ws, heldout, extra)))


def test_unknown_keys_are_config_errors(ws: Path) -> None:
    with pytest.raises(ConfigError, match="heldout"):
        load_training_config(_config(ws, 'eval_config = "configs/eval/calc.toml"\nrows = 3\n'))


def test_several_named_files_resolve_in_order(ws: Path) -> None:
    (ws / "data" / "calc_heldout_more.jsonl").write_text((ws / "data/calc_heldout.jsonl").read_text())
    cfg = load_training_config(_config(
        ws, 'eval_config = "configs/eval/calc.toml"\n[heldout.datasets]\n'
        'seen = "data/calc_heldout.jsonl"\nmore = "data/calc_heldout_more.jsonl"\n'
    ))
    plan = plan_heldout(cfg)
    assert plan is not None
    assert [(s.name, s.dataset) for s in plan.sets] == [
        ("seen", ws / "data/calc_heldout.jsonl"), ("more", ws / "data/calc_heldout_more.jsonl")
    ]
    assert plan.dataset == ws / "data/calc_heldout.jsonl"  # the first file
    run = ws / "runs" / "r"
    assert [s.output(run) for s in plan.sets] == [run / "heldout/seen", run / "heldout/more"]


def test_the_one_file_form_is_one_unnamed_set_in_heldout(ws: Path) -> None:
    plan = plan_heldout(load_training_config(_config(
        ws, 'eval_config = "configs/eval/calc.toml"\ndataset = "data/calc_heldout.jsonl"\n'
    )))
    assert plan is not None and [s.name for s in plan.sets] == [None]
    assert plan.sets[0].output(ws / "r") == ws / "r" / "heldout"


@pytest.mark.parametrize(
    ("heldout", "message"),
    [
        ('dataset = "data/calc_heldout.jsonl"\n[heldout.datasets]\na = "data/calc_heldout.jsonl"\n',
         "either dataset .* or \\[heldout.datasets\\]"),
        ('[heldout.datasets]\nWarm = "data/calc_heldout.jsonl"\n', "'Warm' is not a held-out set name"),
        ('[heldout.datasets]\nbaseline = "data/calc_heldout.jsonl"\n', "name of an eval folder"),
        ("[heldout.datasets]\n", "at least one held-out file"),
    ],
)
def test_named_files_are_checked_when_the_config_is_read(
    ws: Path, heldout: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_training_config(_config(ws, 'eval_config = "configs/eval/calc.toml"\n' + heldout))


def test_a_failing_file_stops_the_others_and_its_error_is_raised_as_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One model runs every held-out file at once: the first file that fails cancels the others'
    evals, and the worker's one-line message is the error itself, not an exception group."""
    import osmosis_ai.eval._heldout as heldout_module
    from osmosis_ai.eval import EvalOptions, HeldOutPlan, HeldOutSet

    cancelled: list[str] = []

    async def fake_eval(config: Path, options: EvalOptions, **_: object) -> None:
        assert options.output is not None
        if options.output.name == "broken":
            raise ConfigError("broken.jsonl, line 3: no user_prompt")
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.append(options.output.name)
            raise

    monkeypatch.setattr(heldout_module, "run_eval", fake_eval)
    plan = HeldOutPlan(eval_config=tmp_path / "e.toml", n=1, concurrency=4, sets=(
        HeldOutSet("slow", None), HeldOutSet("broken", None),
    ))
    options = [EvalOptions(output=tmp_path / s.name) for s in plan.sets if s.name]
    with pytest.raises(ConfigError, match="broken.jsonl, line 3"):
        asyncio.run(heldout_module._each_file(plan, options, None))
    assert cancelled == ["slow"]
