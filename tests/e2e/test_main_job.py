"""The main job: scaffold the Strands calculator and train it on the embedded SmolLM2 (CPU).

``osmosis template create calc --template strands`` then ``osmosis train submit
configs/training/calc.toml``: a warm start on the template's demonstrations, RL, and the
held-out eval of base / warm start / trained. Here cut down to keep the test to a few minutes
(one warm-start epoch on 16 demonstrations, 2 RL steps, 4 rows of the first held-out file and
1 of each other); the shipped config's
full run is measured by the ``learning`` benchmark.
"""

from __future__ import annotations

import json
import math
import os
import re
import tomllib
from pathlib import Path

import pytest

from osmosis_ai.cli._app import main

pytestmark = pytest.mark.slow


# A safety net, not a speed check: the whole job (warm start, 2 RL steps, 4 held-out files x
# 3 models) runs ~5 min on 2 idle cores, past pytest's default 300 s.
@pytest.mark.timeout(1800)
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
    text = re.sub(r"max_steps = \d+", "max_steps = 2", text)
    text = re.sub(r"epochs = \d+", "epochs = 1", text).replace("\nn = 2\n", "\nn = 1\n")
    config.write_text(text)
    held_out = ("calc_heldout_phrasings.jsonl", "calc_heldout_orders.jsonl",
                "calc_heldout_longer.jsonl")
    for name, keep in (("calc_demos.jsonl", 16), ("calc_heldout.jsonl", 4),
                       *((h, 1) for h in held_out)):
        data = tmp_path / "data" / name
        data.write_text("".join(data.read_text().splitlines(keepends=True)[:keep]))
    capsys.readouterr()

    assert main(["train", "submit", str(config), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "finished" and out["steps"] == 2
    run = Path(out["run"])
    every = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    warm = [r for r in every if r.get("kind") == "warm_start"]
    assert warm and all(math.isfinite(r["warm_start/loss"]) for r in warm)
    assert (run / "checkpoints" / "warm" / "adapter").is_dir()
    records = [r for r in every if r.get("kind", "train") == "train"]
    assert [r["step"] for r in records] == [1, 2]
    for r in records:  # tool use per step, from the recorded calls
        assert 0.0 <= r["tools/call_rate"] <= 1.0
        assert r["tools/turns_per_rollout"] >= 1.0 and r["tools/calls_per_rollout"] >= 0.0
    # [heldout]: base, warm start and trained on the same rows, with the paired differences.
    report = out["heldout"]
    assert [m["role"] for m in report["models"]] == ["base", "warm", "trained"]
    assert report["rows"] == 4 and report["pass_vs_warm"]["rows"] == 4
    assert all(m["tool_call_rate"] is not None for m in report["models"])
    # Each held-out file on its own: the first at the top level, the others in order.
    assert report["name"] == "like-training"
    assert [(s["name"], s["dataset"], s["rows"]) for s in report["sets"]] == [
        (name, f"calc_heldout_{name}.jsonl", 1) for name in ("phrasings", "orders", "longer")
    ]
    assert all([m["role"] for m in s["models"]] == ["base", "warm", "trained"]
               for s in report["sets"])
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
