from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from osmosis_ai.config import (
    EvalConfig,
    TrainingConfig,
    find_workspace_root,
    load_eval_config,
    load_training_config,
)
from osmosis_ai.errors import ConfigError

EXPERIMENT = """\
[experiment]
rollout = "calc"
entrypoint = "main.py"
model_path = "openai/gpt-4o-mini"
dataset = "calc"
"""


@pytest.fixture()
def ws(tmp_path: Path) -> Path:
    (tmp_path / "configs" / "eval").mkdir(parents=True)
    (tmp_path / "configs" / "training").mkdir(parents=True)
    (tmp_path / "rollouts" / "calc").mkdir(parents=True)
    (tmp_path / "rollouts" / "calc" / "main.py").write_text("# entry\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "calc.jsonl").write_text('{"user_prompt": "1+1"}\n')
    return tmp_path


def cfg(ws: Path, body: str, kind: str = "training") -> Path:
    path = ws / "configs" / kind / "x.toml"
    path.write_text(textwrap.dedent(body))
    return path


def test_training_defaults_follow_the_reference(ws: Path) -> None:
    c = load_training_config(cfg(ws, EXPERIMENT))
    t = c.training
    assert (t.lr, t.total_epochs, t.n_samples_per_prompt, t.rollout_batch_size) == (1e-5, 1, 8, 32)
    assert (t.max_prompt_length, t.max_response_length) == (8192, 8192)
    assert (t.agent_workflow_timeout_s, t.grader_timeout_s) == (450, 150)
    assert (t.max_steps, t.seed, t.concurrency, t.engine, t.device) == (None, 0, None, "hf", "auto")
    assert (c.sampling.rollout_temperature, c.sampling.rollout_top_p) == (1.0, 1.0)
    assert c.sampling.max_tokens is None
    assert (c.checkpoints.checkpoint_save_freq, c.checkpoints.eval_interval) == (20, None)
    assert (c.lora.r, c.lora.alpha, c.lora.dropout, c.lora.target_modules) == (8, 16, 0.0, "all-linear")
    a = c.algorithm
    assert (a.loss_type, a.scale_rewards, a.epsilon, a.epsilon_high, a.beta) == (
        "dapo", "group", 0.2, 0.28, 0.0)
    assert (a.is_correction, a.is_clip_max, a.is_clip_min, a.max_failure_rate) == (
        "token_truncate", 3.0, None, 0.5)
    assert c.remote is None and c.env == {} and c.secrets.required == []


def test_eval_defaults_follow_the_reference(ws: Path) -> None:
    c = load_eval_config(cfg(ws, EXPERIMENT, "eval"))
    e = c.evaluation
    assert (e.limit, e.n, e.batch_size, e.pass_threshold) == (None, 1, 1, 1.0)
    assert (e.agent_workflow_timeout_s, e.grader_timeout_s, e.concurrency) == (450, 150, None)
    assert isinstance(c, EvalConfig)


def test_values_are_read(ws: Path) -> None:
    c = load_training_config(cfg(ws, EXPERIMENT + """
        commit_sha = "abc1234"
        [training]
        lr = 1e-6
        n_samples_per_prompt = 4
        engine = "vllm"
        [sampling]
        rollout_temperature = 0.7
        max_tokens = 256
        [lora]
        target_modules = ["q_proj", "v_proj"]
        [remote]
        server_url = "http://127.0.0.1:9000"
        [env]
        MODE = "fast"
        [secrets]
        required = ["OPENAI_API_KEY"]
    """))
    assert c.experiment.commit_sha == "abc1234"
    assert (c.training.lr, c.training.n_samples_per_prompt, c.training.engine) == (1e-6, 4, "vllm")
    assert c.sampling.as_params() == {"temperature": 0.7, "top_p": 1.0, "max_tokens": 256}
    assert c.lora.target_modules == ["q_proj", "v_proj"]
    assert c.remote is not None and c.remote.server_url == "http://127.0.0.1:9000"
    assert c.env == {"MODE": "fast"}
    assert c.missing_secrets({}) == ["OPENAI_API_KEY"]
    assert c.missing_secrets({"OPENAI_API_KEY": "k"}) == []


def test_unknown_key_names_file_line_key_path_and_closest_name(ws: Path) -> None:
    path = cfg(ws, EXPERIMENT + "[training]\nlr = 1e-5\nn_sample_per_prompt = 4\n")
    with pytest.raises(ConfigError) as info:
        load_training_config(path)
    assert str(info.value) == (
        f"{path}:8: unknown key [training].n_sample_per_prompt; "
        "did you mean 'n_samples_per_prompt'?"
    )


def test_unknown_section_suggests_the_closest(ws: Path) -> None:
    path = cfg(ws, EXPERIMENT + "[trainig]\nlr = 1e-5\n")
    with pytest.raises(ConfigError) as info:
        load_training_config(path)
    assert str(info.value).startswith(f"{path}:6: unknown section [trainig]; did you mean [training]?")
    assert "valid sections: [experiment], [env], [secrets], [remote], [gateway], [advanced], [training]" in (
        str(info.value)
    )


def test_eval_config_rejects_training_sections(ws: Path) -> None:
    path = cfg(ws, EXPERIMENT + "[lora]\nr = 4\n", "eval")
    with pytest.raises(ConfigError, match=r"x\.toml:6: unknown section \[lora\]; valid sections: "):
        load_eval_config(path)


def test_key_in_the_wrong_section_points_to_the_right_one(ws: Path) -> None:
    path = cfg(ws, EXPERIMENT + "[training]\nrollout_temperature = 0.5\n")
    with pytest.raises(ConfigError) as info:
        load_training_config(path)
    assert "unknown key [training].rollout_temperature; did you mean " \
           "[sampling].rollout_temperature?" in str(info.value)


def test_top_level_key_is_an_error(ws: Path) -> None:
    path = cfg(ws, "lr = 1e-5\n" + EXPERIMENT)
    with pytest.raises(ConfigError) as info:
        load_training_config(path)
    assert str(info.value) == (
        f"{path}:1: unknown top-level key 'lr'; did you mean [training].lr? "
        "keys belong inside a [section]"
    )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ('[training]\nlr = "fast"\n', ":7: [training].lr: expected a number, got 'fast' (str)"),
        ("[training]\ntotal_epochs = 1.5\n", ":7: [training].total_epochs: expected an integer, "
                                             "got 1.5 (float)"),
        ('[training]\nengine = "tgi"\n', ":7: [training].engine: expected one of 'hf', 'vllm', "
                                         "got 'tgi' (str)"),
        ("[training]\nmax_steps = true\n", ":7: [training].max_steps: expected an integer, "
                                           "got True (bool)"),
        ("[lora]\ntarget_modules = 3\n", ":7: [lora].target_modules: expected a string or an "
                                         "array of strings, got 3 (int)"),
        ("[training]\nn_samples_per_prompt = 0\n", ":7: [training].n_samples_per_prompt: Input "
                                                   "should be greater than or equal to 1 (got 0)"),
        ('[secrets]\nrequired = [1]\n', ":7: [secrets].required[0]: expected a string, got 1 (int)"),
        ("[algorithm]\nis_clip_min = 4.0\n", ": [algorithm]: is_clip_min (4.0) must be below "
                                             "is_clip_max (3.0)"),
    ],
)
def test_type_errors_name_file_line_key_and_expected_type(
    ws: Path, extra: str, message: str
) -> None:
    path = cfg(ws, EXPERIMENT + extra)
    with pytest.raises(ConfigError) as info:
        load_training_config(path)
    assert str(info.value).startswith(str(path))
    assert message in str(info.value)


def test_missing_required_keys_and_sections(ws: Path) -> None:
    path = cfg(ws, '[experiment]\nrollout = "calc"\nentrypoint = "main.py"\ndataset = "d"\n')
    with pytest.raises(ConfigError) as info:
        load_training_config(path)
    assert str(info.value) == (
        f"{path}:1: [experiment].model_path is required; add it under [experiment]"
    )
    path = cfg(ws, "[training]\nlr = 1e-5\n")
    with pytest.raises(ConfigError, match=r"missing section \[experiment\]; add it with its "
                                          r"required keys"):
        load_training_config(path)


def test_several_problems_are_reported_together(ws: Path) -> None:
    path = cfg(ws, EXPERIMENT + "[training]\nlr = 'x'\nepochs = 2\n")
    with pytest.raises(ConfigError) as info:
        load_training_config(path)
    text = str(info.value)
    assert text.startswith(f"{path}: 2 problems:\n")
    assert f"{path}:8: unknown key [training].epochs" in text
    assert f"{path}:7: [training].lr: expected a number" in text


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ('commit_sha = "xyz"\n', "[experiment].commit_sha: String should match pattern"),
        ('commit_sha = "abcdef1"\nbranch = "main"\n', "[experiment]: set either commit_sha or "
                                                      "branch, not both"),
        ('[env]\nlower = "x"\n', "[env]: env key 'lower' must match ^[A-Z_][A-Z0-9_]*$"),
        ('[env]\n_OSMOSIS_X = "x"\n', "names starting with _OSMOSIS_ are reserved"),
        ('[secrets]\nrequired = ["A", "A"]\n', "[secrets].required: duplicate secret names: A"),
        ('[secrets]\nrequired = ["key"]\n', "secret name 'key' must match ^[A-Z][A-Z0-9_]*$"),
        ('[env]\nTOKEN = "x"\n[secrets]\nrequired = ["TOKEN"]\n',
         "TOKEN appear in both [env] and [secrets].required"),
        ('[remote]\nserver_url = "localhost:9000"\n', "[remote].server_url: String should match"),
    ],
)
def test_experiment_env_secrets_rules(ws: Path, extra: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_training_config(cfg(ws, EXPERIMENT + extra))
    assert message in str(info.value)


def test_invalid_toml_and_missing_file(ws: Path) -> None:
    path = cfg(ws, "[experiment\n")
    with pytest.raises(ConfigError, match=r"x\.toml: invalid TOML: .*line 1"):
        load_training_config(path)
    with pytest.raises(ConfigError, match=r"nope\.toml: config file not found"):
        load_eval_config(ws / "nope.toml")


def test_paths_resolve_against_the_workspace_root(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ws / "data")  # the cwd must not matter
    c = load_training_config(cfg(ws, EXPERIMENT + '[checkpoints]\noutput_dir = "runs/x"\n'))
    assert c.workspace_root == ws.resolve()
    assert c.source_path == (ws / "configs" / "training" / "x.toml").resolve()
    assert c.rollout_dir() == ws.resolve() / "rollouts" / "calc"
    assert c.entrypoint_path() == ws.resolve() / "rollouts" / "calc" / "main.py"
    assert c.dataset_path() == ws.resolve() / "data" / "calc.jsonl"  # a bare name -> data/
    assert c.output_dir() == ws.resolve() / "runs" / "x"
    c2 = c.model_copy(update={"experiment": c.experiment.model_copy(
        update={"dataset": "data/calc.jsonl"})})
    assert c2.dataset_path() == ws.resolve() / "data" / "calc.jsonl"


def test_missing_paths_name_the_config_key(ws: Path) -> None:
    c = load_eval_config(cfg(ws, EXPERIMENT.replace('dataset = "calc"', 'dataset = "other"'), "eval"))
    with pytest.raises(ConfigError) as info:
        c.dataset_path()
    assert "[experiment].dataset = 'other': no dataset file found" in str(info.value)
    assert str(ws.resolve() / "data" / "other.jsonl") in str(info.value)
    c = load_eval_config(cfg(ws, EXPERIMENT.replace('rollout = "calc"', 'rollout = "calk"'), "eval"))
    with pytest.raises(ConfigError, match=r"\[experiment\].rollout = 'calk': folder .* not found "
                                          r"\(rollouts found: calc\)"):
        c.rollout_dir()
    c = load_eval_config(cfg(ws, EXPERIMENT.replace('"main.py"', '"agent.py"'), "eval"))
    with pytest.raises(ConfigError, match=r"\[experiment\].entrypoint = 'agent.py': file .* not "
                                          r"found \(Python files there: main.py\)"):
        c.entrypoint_path()


def test_workspace_root_falls_back_to_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "loose.toml"
    path.write_text(EXPERIMENT)
    monkeypatch.chdir(tmp_path)
    assert find_workspace_root(path) == Path.cwd()
    assert find_workspace_root(tmp_path / "w" / "configs" / "eval" / "a.toml") == tmp_path / "w"
    assert load_training_config(path).workspace_root == Path.cwd()


def test_every_field_is_documented() -> None:
    from pydantic import BaseModel

    def walk(model: type[BaseModel]) -> None:
        for name, info in model.model_fields.items():
            assert info.description, f"{model.__name__}.{name} has no docstring"
            sub = info.annotation
            for candidate in getattr(sub, "__args__", (sub,)):
                if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                    walk(candidate)

    walk(TrainingConfig)
    walk(EvalConfig)


def test_step_concurrency_is_one_steps_worth_unless_set() -> None:
    from osmosis_ai.config._sections import TrainingSection

    assert TrainingSection(rollout_batch_size=4, n_samples_per_prompt=8).step_concurrency == 32
    assert TrainingSection(rollout_batch_size=4, concurrency=6).step_concurrency == 6
