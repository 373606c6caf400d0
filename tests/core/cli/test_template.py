"""``osmosis template list | create``: scaffolds, overwrite protection, name rules."""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path

import pytest

from osmosis_ai.templates import list_templates, templates_root

from .conftest import RunCli

OWN_TEMPLATES = ["single-call", "strands", "openai-agents"]
SCAFFOLD = [
    "rollouts/calc/main.py",
    "rollouts/calc/pyproject.toml",
    "configs/eval/calc.toml",
    "configs/training/calc.toml",
    "data/calc.jsonl",
]


def test_templates_are_found_in_the_checkout() -> None:
    root = templates_root()
    assert (root / "README.md").is_file()
    names = [t.name for t in list_templates()]
    for name in OWN_TEMPLATES:
        assert name in names


def test_every_template_manifest_lists_existing_files() -> None:
    for t in list_templates():
        assert t.description, t.name
        for source in t.files:
            assert (t.path / source).is_file(), f"{t.name}: {source}"


def test_template_list_table_and_json(run_cli: RunCli) -> None:
    res = run_cli("template", "list")
    assert res.code == 0
    for name in OWN_TEMPLATES:
        assert name in res.out
    data = run_cli("template", "list", "--json").json()
    by_name = {t["name"]: t for t in data}
    assert by_name["strands"]["requires"] == ["strands"]
    assert "rollouts/{{name}}/main.py" in by_name["single-call"]["files"]


@pytest.mark.parametrize("template", OWN_TEMPLATES)
def test_create_writes_the_scaffold_with_the_name_substituted(
    run_cli: RunCli, tmp_path: Path, template: str
) -> None:
    res = run_cli("template", "create", "calc", "--template", template, "--dir", tmp_path)
    assert res.code == 0, res.err
    for rel in SCAFFOLD:
        assert (tmp_path / rel).is_file(), rel
        assert rel in res.out
    assert "osmosis eval run configs/eval/calc.toml" in res.out
    if template != "single-call":
        assert f'pip install "osmosis-ai[{template}]"' in res.out
    for kind in ("eval", "training"):
        cfg = tomllib.loads((tmp_path / f"configs/{kind}/calc.toml").read_text())
        assert cfg["experiment"]["rollout"] == "calc"
        assert cfg["experiment"]["dataset"] == "data/calc.jsonl"
        assert cfg["experiment"]["model_path"] == "embedded"
    pyproject = tomllib.loads((tmp_path / "rollouts/calc/pyproject.toml").read_text())
    assert pyproject["project"]["name"] == "calc"
    assert "{{" not in (tmp_path / "rollouts/calc/main.py").read_text()
    rows = (tmp_path / "data/calc.jsonl").read_text().splitlines()
    assert len(rows) >= 20


def test_create_configs_load_with_the_config_schema(run_cli: RunCli, tmp_path: Path) -> None:
    from osmosis_ai.config import load_eval_config, load_training_config

    for template in OWN_TEMPLATES:
        ws = tmp_path / template
        assert run_cli("template", "create", "calc", "-t", template, "--dir", ws).code == 0
        ev = load_eval_config(ws / "configs/eval/calc.toml")
        assert ev.entrypoint_path() == ws / "rollouts/calc/main.py"
        tr = load_training_config(ws / "configs/training/calc.toml")
        # sized for the CPU main job: a few dozen small steps at most (the time budget itself is
        # measured by the learning benchmark, not asserted here)
        assert tr.training.max_steps is not None and tr.training.max_steps <= 20
        assert tr.training.rollout_batch_size * tr.training.n_samples_per_prompt <= 32
        assert tr.lora.r == 8


def test_create_refuses_to_overwrite_and_lists_the_files(run_cli: RunCli, tmp_path: Path) -> None:
    assert run_cli("template", "create", "calc", "--dir", tmp_path).code == 0
    main_py = tmp_path / "rollouts/calc/main.py"
    main_py.write_text("# my edits\n")
    res = run_cli("template", "create", "calc", "--dir", tmp_path)
    assert res.code == 1
    assert "refusing to overwrite 5 existing file(s)" in res.err
    assert "rollouts/calc/main.py" in res.err and "data/calc.jsonl" in res.err
    assert "--force" in res.err
    assert main_py.read_text() == "# my edits\n"


def test_create_partial_conflict_writes_nothing(run_cli: RunCli, tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data/calc.jsonl").write_text("{}\n")
    res = run_cli("template", "create", "calc", "--dir", tmp_path)
    assert res.code == 1
    assert "refusing to overwrite 1 existing file(s)" in res.err and "data/calc.jsonl" in res.err
    assert not (tmp_path / "rollouts").exists()


def test_create_force_overwrites(run_cli: RunCli, tmp_path: Path) -> None:
    assert run_cli("template", "create", "calc", "--dir", tmp_path).code == 0
    (tmp_path / "rollouts/calc/main.py").write_text("# my edits\n")
    res = run_cli("template", "create", "calc", "--force", "--dir", tmp_path, "--json")
    assert res.code == 0
    assert "rollouts/calc/main.py" in res.json()["overwritten"]
    assert "AgentWorkflow" in (tmp_path / "rollouts/calc/main.py").read_text()


@pytest.mark.parametrize(
    "name",
    ["../evil", "a/b", "/abs", "1calc", "Calc", "has space", "calc!", "", "x" * 65, "default"],
)
def test_create_rejects_bad_names(run_cli: RunCli, tmp_path: Path, name: str) -> None:
    res = run_cli("template", "create", name, "--dir", tmp_path)
    assert res.code == 1
    assert f"invalid rollout name {name!r}" in res.err
    assert "lowercase letter" in res.err or "reserved" in res.err
    assert list(tmp_path.iterdir()) == []


def test_create_refuses_to_write_through_a_symlink_out_of_the_workspace(
    run_cli: RunCli, tmp_path: Path
) -> None:
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    (ws / "rollouts").symlink_to(outside)
    res = run_cli("template", "create", "calc", "--dir", ws)
    assert res.code == 1
    assert "outside the workspace" in res.err
    assert list(outside.iterdir()) == []


def test_create_unknown_template_suggests(run_cli: RunCli, tmp_path: Path) -> None:
    res = run_cli("template", "create", "calc", "-t", "strand", "--dir", tmp_path)
    assert res.code == 1
    assert "unknown template 'strand' (did you mean 'strands'?)" in res.err
    assert "single-call" in res.err


@pytest.mark.parametrize("name", ["single-call", "strands", "openai-agents"])
def test_calculator_templates_grade_with_the_shared_numeric_grader(name: str) -> None:
    """The grader lives once in osmosis_ai.grading; each template subclasses it (discovery
    needs a Grader defined in the rollout's own file). The strands quick start adds credit
    for the steps of a multi-step question on top (its own grade(), the same score rule)."""
    from osmosis_ai.grading import NumericAnswerGrader

    pytest.importorskip({"strands": "strands", "openai-agents": "agents"}.get(name, "osmosis_ai"))
    path = templates_root() / name / "main.py"
    spec = importlib.util.spec_from_file_location(f"_tpl_{name.replace('-', '_')}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    grader = module.CalculatorGrader
    assert issubclass(grader, NumericAnswerGrader) and "score" not in vars(grader)
    assert ("grade" in vars(grader)) == (name == "strands")


def test_remote_server_template_is_created_and_validated(
    run_cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    res = run_cli("template", "create", "calc", "-t", "remote-server", "--dir", tmp_path)
    assert res.code == 0, res.err
    assert (tmp_path / "rollouts/calc/server.py").is_file()
    assert (tmp_path / "configs/training/calc.toml").is_file()
    monkeypatch.chdir(tmp_path / "rollouts/calc")
    monkeypatch.syspath_prepend(str(tmp_path / "rollouts/calc"))
    res = run_cli("validate", "-m", "server:agent_loop", "--json")
    assert res.code == 0, res.out + res.err
    assert res.json()["ok"] is True and len(res.json()["tools"]) == 4
