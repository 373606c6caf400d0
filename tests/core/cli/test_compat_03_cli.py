"""The commands and flags users of the original osmosis-ai 0.3 CLI type (issue 39 §4)."""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path

import pytest

from osmosis_ai import __version__
from osmosis_ai.cli._secrets_file import apply_secrets_file, read_secrets_file
from osmosis_ai.cli.platform import PLATFORM_ONLY
from osmosis_ai.cli.rollout import RECIPES, list_rollouts, recipe_template
from osmosis_ai.errors import ConfigError
from tests.core.cli.conftest import RunCli

# -- global flags ---------------------------------------------------------------------------


def test_version_prints_the_installed_version(run_cli: RunCli) -> None:
    for flag in ("--version", "-V"):
        result = run_cli(flag)
        assert (result.code, result.out.strip()) == (0, f"osmosis-ai {__version__}")


def test_json_anywhere_on_the_line_reaches_the_command(run_cli: RunCli, tmp_path: Path) -> None:
    (tmp_path / "rollouts" / "calc").mkdir(parents=True)
    before = run_cli("--json", "rollout", "list", "--dir", str(tmp_path))
    after = run_cli("rollout", "list", "--dir", str(tmp_path), "--json")
    assert before.code == after.code == 0
    assert before.json() == after.json()
    assert [r["name"] for r in before.json()] == ["calc"]


def test_json_makes_errors_machine_readable(run_cli: RunCli, tmp_path: Path) -> None:
    result = run_cli("--json", "eval", "run", str(tmp_path / "missing.toml"))
    assert result.code == 1 and result.out == ""
    error = json.loads(result.err)["error"]
    assert error["code"] == "ConfigError" and "does not exist" in error["message"]


def test_plain_prints_no_terminal_codes(run_cli: RunCli) -> None:
    result = run_cli("--plain", "template", "list")
    assert result.code == 0 and "single-call" in result.out
    assert "\x1b[" not in result.out


# -- platform-only commands -----------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["auth", "login", "--token", "t0k3n"],
        ["auth", "whoami"],
        ["secret", "set", "OPENAI_API_KEY"],
        ["dataset", "upload", "data/x.jsonl"],
        ["benchmark", "run", "configs/x.toml"],
        ["upgrade"],
    ],
)
def test_platform_only_commands_say_what_to_do_locally(run_cli: RunCli, argv: list[str]) -> None:
    result = run_cli(*argv)
    command = "dataset upload" if argv[0] == "dataset" else argv[0]
    assert result.code == 2
    assert result.out == ""
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    assert f"'osmosis {command}' is a hosted-platform command" in lines[0]
    assert PLATFORM_ONLY[command][:40] in " ".join(result.err.split())
    assert "t0k3n" not in result.err


def test_platform_only_with_json_is_a_json_error(run_cli: RunCli) -> None:
    result = run_cli("--json", "secret", "list")
    assert result.code == 2
    assert json.loads(result.err)["error"]["code"] == "PLATFORM_ONLY"


# -- rollout init / list, template apply -----------------------------------------------------


def test_rollout_init_scaffolds_like_template_create(run_cli: RunCli, tmp_path: Path) -> None:
    result = run_cli("rollout", "init", "calc", "--dir", str(tmp_path), "--json")
    assert result.code == 0, result.err
    assert result.json()["template"] == "single-call"
    for rel in ("rollouts/calc/main.py", "configs/eval/calc.toml", "configs/training/calc.toml"):
        assert (tmp_path / rel).is_file(), rel
    again = run_cli("rollout", "init", "calc", "--dir", str(tmp_path))
    assert again.code == 1 and "--force" in again.err  # never overwrites without --force
    assert run_cli("rollout", "init", "calc", "--dir", str(tmp_path), "--force").code == 0


def test_rollout_list_names_entrypoints_and_configs(run_cli: RunCli, tmp_path: Path) -> None:
    run_cli("rollout", "init", "calc", "--dir", str(tmp_path))
    (tmp_path / "rollouts" / "bare").mkdir()
    (tmp_path / "configs" / "eval" / "broken.toml").write_text("[experiment\n")
    (tmp_path / "rollouts" / "calc" / "make_data.py").write_text("")
    entries = {e.name: e for e in list_rollouts(tmp_path)}
    assert entries["calc"].entrypoints == ["main.py"]  # the file the configs name
    assert entries["calc"].other_scripts == ["make_data.py"]  # a helper is not an entrypoint
    assert entries["calc"].configs == ["configs/eval/calc.toml", "configs/training/calc.toml"]
    assert (entries["bare"].entrypoints, entries["bare"].configs) == ([], [])
    # A config that names another file makes that file the entrypoint, main.py a helper.
    (tmp_path / "rollouts" / "calc" / "[agent].py").write_text("")
    config = tmp_path / "configs" / "eval" / "calc.toml"
    config.write_text(config.read_text().replace('"main.py"', '"[agent].py"'))
    entries = {e.name: e for e in list_rollouts(tmp_path)}
    assert entries["calc"].entrypoints == ["[agent].py", "main.py"]  # eval's, then training's
    assert entries["calc"].other_scripts == ["make_data.py"]
    text = run_cli("rollout", "list", "--dir", str(tmp_path))
    assert text.code == 0 and "calc" in text.out and "bare" in text.out
    assert "[agent].py" in text.out and "make_data.py" in text.out  # names shown as written
    empty = run_cli("rollout", "list", "--dir", str(tmp_path / "nowhere"))
    assert empty.code == 0 and "osmosis rollout init NAME" in empty.out


def test_template_apply_maps_the_03_recipes(run_cli: RunCli, tmp_path: Path) -> None:
    assert recipe_template("multiply-local-strands") == ("strands", "multiply-local-strands")
    assert recipe_template("multiply-local-openai") == ("openai-agents", "multiply-local-openai")
    assert recipe_template("single-call") == ("single-call", "single-call")
    result = run_cli("template", "apply", "multiply-local-openai", "--dir", str(tmp_path))
    assert result.code == 0, result.err
    assert (tmp_path / "rollouts" / "multiply-local-openai" / "main.py").is_file()
    assert (tmp_path / "configs" / "eval" / "multiply-local-openai.toml").is_file()
    unknown = run_cli("template", "apply", "multiply-remote", "--dir", str(tmp_path))
    assert unknown.code == 1 and all(r in unknown.err for r in RECIPES)


# -- secrets file ---------------------------------------------------------------------------


def test_secrets_file_reads_dotenv_lines(tmp_path: Path) -> None:
    f = tmp_path / "secrets.env"
    f.write_text("# keys\n\nOPENAI_API_KEY=sk-1\nexport JUDGE_KEY = 'q u'\nEMPTY=\nURL=\"a=b\"\n")
    assert read_secrets_file(f) == {
        "OPENAI_API_KEY": "sk-1",
        "JUDGE_KEY": "q u",
        "EMPTY": "",
        "URL": "a=b",
    }


def test_a_bad_secrets_line_is_named_by_number_never_shown(tmp_path: Path) -> None:
    f = tmp_path / "secrets.env"
    f.write_text("A=1\nsk-live-value-without-name\n")
    with pytest.raises(ConfigError) as info:
        read_secrets_file(f)
    assert f"{f}:2: expected NAME=value" in str(info.value)
    assert "sk-live" not in str(info.value)
    with pytest.raises(ConfigError, match="cannot read it"):
        read_secrets_file(tmp_path / "absent.env")


def test_secrets_file_values_win_over_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("H39_KEY", "old")
    f = tmp_path / "s.env"
    f.write_text("H39_KEY=new\nH39_OTHER=x\n")
    assert apply_secrets_file(f) == ["H39_KEY", "H39_OTHER"]
    assert (os.environ["H39_KEY"], os.environ["H39_OTHER"]) == ("new", "x")
    monkeypatch.delenv("H39_OTHER")
    assert apply_secrets_file(None) == []


def test_eval_run_refuses_disagreeing_concurrency_flags(run_cli: RunCli, tmp_path: Path) -> None:
    run_cli("rollout", "init", "calc", "--dir", str(tmp_path))
    config = tmp_path / "configs" / "eval" / "calc.toml"
    result = run_cli("eval", "run", str(config), "--concurrency", "2", "--max-in-flight", "3")
    assert result.code == 1 and "--max-in-flight 3 disagree" in result.err


# -- train list / stop ----------------------------------------------------------------------


def test_train_list_limit_and_all(run_cli: RunCli, tmp_path: Path) -> None:
    from osmosis_ai.runs import create_run_dir

    root = tmp_path / "runs"
    for day in range(1, 5):
        create_run_dir(root, f"r{day}", now=datetime(2026, 1, day, 9, 0, 0), model="embedded")
    newest = run_cli("train", "list", "--runs-dir", str(root), "--limit", "2", "--json").json()
    assert [r["run_id"].split("-")[0] for r in newest] == ["r3", "r4"]
    every = run_cli("--json", "train", "list", "--runs-dir", str(root), "--all", "--limit", "1")
    assert len(every.json()) == 4
    text = run_cli("train", "list", "--runs-dir", str(root), "--limit", "3")
    assert "showing the newest 3 of 4 runs; --all shows all" in text.err


def test_train_stop_yes_and_json_on_a_finished_run(run_cli: RunCli, tmp_path: Path) -> None:
    from osmosis_ai.runs import create_run_dir

    run = create_run_dir(tmp_path / "runs", "done", model="embedded")
    run.update_status(status="finished")
    result = run_cli("train", "stop", run.run_id, "--yes", "--runs-dir", str(tmp_path / "runs"))
    assert result.code == 1 and "already finished; nothing to stop" in result.err


# -- doctor --fix ---------------------------------------------------------------------------


def test_doctor_fix_creates_the_workspace_folders(run_cli: RunCli, tmp_path: Path) -> None:
    (tmp_path / "data").write_text("a file where a folder belongs\n")
    report = run_cli("doctor", "--json", "--dir", str(tmp_path)).json()["workspace"]
    assert report["missing"] == ["rollouts", "configs/eval", "configs/training", "data"]
    assert report["created"] == []
    fixed = run_cli("doctor", "--fix", "--json", "--dir", str(tmp_path)).json()["workspace"]
    assert fixed["created"] == ["rollouts", "configs/eval", "configs/training"]
    assert fixed["blocked"] == ["data"]
    assert (tmp_path / "configs" / "training").is_dir()
    assert (tmp_path / "data").read_text() == "a file where a folder belongs\n"


# -- [secrets] with a local model -----------------------------------------------------------


def test_missing_secrets_warn_for_a_local_model_and_stop_a_hosted_one(
    run_cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from osmosis_ai.eval import EvalOptions, plan_eval

    monkeypatch.delenv("H39_HOSTED_KEY", raising=False)
    run_cli("rollout", "init", "calc", "--dir", str(tmp_path))
    config = tmp_path / "configs" / "eval" / "calc.toml"
    config.write_text(config.read_text() + '\n[secrets]\nrequired = ["H39_HOSTED_KEY"]\n')
    plan = plan_eval(config, EvalOptions())  # model_path = "embedded"
    assert len(plan.notes) == 1
    assert "H39_HOSTED_KEY, which is not set; the model embedded is local" in plan.notes[0]
    served = plan_eval(config, EvalOptions(model="http://127.0.0.1:9/v1"))
    assert "H39_HOSTED_KEY" in served.notes[0]
    with pytest.raises(ConfigError, match=r"H39_HOSTED_KEY, which is not set .*--secrets-file"):
        plan_eval(config, EvalOptions(model="openai/gpt-4o-mini"))
    monkeypatch.setenv("H39_HOSTED_KEY", "set")
    assert plan_eval(config, EvalOptions()).notes == []


# -- osmosis validate on a [remote] config ----------------------------------------------------


def _remote_workspace(root: Path, reward: str, grader: bool) -> Path:
    (root / "rollouts" / "calc").mkdir(parents=True)
    (root / "data").mkdir()
    (root / "data" / "calc.jsonl").write_text('{"user_prompt": "1+1", "ground_truth": "2"}\n')
    body = "from osmosis_ai.rollout import Grader\n\n\nclass Exact(Grader):\n"
    body += "    async def grade(self, ctx):\n        pass\n"
    (root / "rollouts" / "calc" / "server.py").write_text(body if grader else "x = 1\n")
    config = root / "configs" / "training" / "calc.toml"
    config.parent.mkdir(parents=True)
    config.write_text(
        '[experiment]\nrollout = "calc"\nentrypoint = "server.py"\nmodel_path = "embedded"\n'
        'dataset = "calc"\n\n[remote]\nserver_url = "http://127.0.0.1:9"\n' + reward
    )
    return config


def test_validate_remote_auto_names_the_reward_source(run_cli: RunCli, tmp_path: Path) -> None:
    config = _remote_workspace(tmp_path, "", grader=True)
    report = run_cli("validate", str(config), "--json").json()
    assert report["ok"] is True and report["grader"]["name"] == "Exact"
    assert report["remote"]["reward"] == "auto"
    assert report["remote"]["rewards"] == (
        "rewards: the server's when it sends one, else the Grader Exact"
    )
    text = run_cli("validate", str(config))
    assert text.code == 0 and "on the remote server http://127.0.0.1:9" in text.out


def test_validate_remote_auto_without_a_grader_fails(run_cli: RunCli, tmp_path: Path) -> None:
    config = _remote_workspace(tmp_path, "", grader=False)
    result = run_cli("validate", str(config))
    assert result.code == 1
    assert "nothing is sure to produce a reward" in " ".join(result.err.split())
    server = _remote_workspace(tmp_path / "s", 'reward = "server"\n', grader=False)
    report = run_cli("validate", str(server), "--json").json()
    assert report["ok"] is True and report["grader"] is None
    assert report["remote"]["rewards"].startswith("rewards: the server's (a result without")


def test_eval_environment_env_advanced_and_verbose(
    run_cli: RunCli,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import logging

    from osmosis_ai.cli.eval import _VERBOSE_HANDLER, _prepare_environment

    run_cli("rollout", "init", "calc", "--dir", str(tmp_path))
    config = tmp_path / "configs" / "eval" / "calc.toml"
    config.write_text(config.read_text() + '\n[env]\nH39_MODE = "x"\n\n[advanced]\nkl_coef = 0.1\n')
    monkeypatch.delenv("H39_MODE", raising=False)
    for name in ("osmosis", "osmosis_ai", "osmosis_trainer", "osmosis_integrations"):
        other = logging.getLogger(name)  # restored after the test: no handler left behind
        monkeypatch.setattr(other, "handlers", [])
        monkeypatch.setattr(other, "level", other.level)
    logger = logging.getLogger("osmosis")
    capsys.readouterr()
    _prepare_environment(config, verbose=True)
    _prepare_environment(config, verbose=True)
    assert os.environ["H39_MODE"] == "x"
    assert logger.handlers == [_VERBOSE_HANDLER] and logger.level == logging.INFO
    err = " ".join(capsys.readouterr().err.split())
    assert "[advanced] kl_coef: settings of the hosted trainer" in err and "(ignored)" in err
    monkeypatch.delenv("H39_MODE")
