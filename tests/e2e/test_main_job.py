"""The main job: scaffold the Strands calculator and train it on the embedded SmolLM2 (CPU).

``osmosis template create calc --template strands`` then ``osmosis train submit
configs/training/calc.toml``; here capped at 2 steps to keep the test to a few minutes (the
shipped config runs 8 steps, a few minutes on 2 cores).
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from pathlib import Path

import pytest

from osmosis_ai.cli._app import main

pytestmark = pytest.mark.slow


def test_scaffold_and_train_calc_on_smollm2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("strands")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(os.environ, "OMP_WAIT_POLICY", "PASSIVE")
    assert main(["template", "create", "calc", "--template", "strands"]) == 0
    config = tmp_path / "configs" / "training" / "calc.toml"
    text = config.read_text()
    assert 'model_path = "embedded"' in text
    config.write_text(re.sub(r"max_steps = \d+", "max_steps = 2", text))
    capsys.readouterr()

    assert main(["train", "submit", str(config), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "finished" and out["steps"] == 2
    run = Path(out["run"])
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2]
    # One step's rollouts: rollout_batch_size x n_samples_per_prompt, as the template sets them.
    training = tomllib.loads(text)["training"]
    per_step = training["rollout_batch_size"] * training["n_samples_per_prompt"]
    assert all(r["rollouts"] == per_step for r in records)
    assert records[0]["policy_calls"] >= records[0]["samples"] > 0

    from peft import PeftModel

    from osmosis_trainer.models import load_model

    base = load_model("embedded")
    adapter = Path(out["last_checkpoint"]) / "adapter"
    model = PeftModel.from_pretrained(base.model, str(adapter))
    ids = base.tokenizer("What is 2 + 3?", return_tensors="pt")["input_ids"]
    assert model(input_ids=ids).logits.shape[-1] == len(base.tokenizer)
