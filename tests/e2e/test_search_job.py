"""The search template trained on the embedded SmolLM2 (CPU), as the README says to run it.

``osmosis template create kb --template search`` then ``osmosis train submit
configs/training/kb.toml``: a warm start on the template's demonstrations, RL through the OpenAI
Agents SDK (``Runner.run`` in a session, a SQLite/FTS5 knowledge base), and the held-out eval
of base / warm start / trained. Cut down to keep the test to a few minutes on 2 cores (16
demonstrations, 2 RL steps of 2 rows x 4 samples, 4 held-out rows); the shipped config's full
run is measured by the ``learning`` benchmark (``search`` table).
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


# A safety net, not a speed check: 2 warm-start and 2 RL steps plus a held-out eval pass
# pytest's default 300 s on 2 busy cores.
@pytest.mark.timeout(1800)
def test_scaffold_and_train_search_on_smollm2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("agents")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(os.environ, "OMP_WAIT_POLICY", "PASSIVE")
    assert main(["template", "create", "kb", "--template", "search"]) == 0
    config = tmp_path / "configs" / "training" / "kb.toml"
    text = config.read_text()
    assert 'model_path = "embedded"' in text
    for key, value in (("max_steps", 2), ("rollout_batch_size", 2), ("n_samples_per_prompt", 4)):
        text, n = re.subn(rf"\n{key} = \d+\n", f"\n{key} = {value}\n", text)
        assert n == 1, key
    config.write_text(text)
    for name, keep in (("kb_demos.jsonl", 16), ("kb_heldout.jsonl", 4), ("kb_test.jsonl", 4)):
        data = tmp_path / "data" / name
        data.write_text("".join(data.read_text().splitlines(keepends=True)[:keep]))
    capsys.readouterr()

    assert main(["train", "submit", str(config), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "finished" and out["steps"] == 2
    run = Path(out["run"])
    every = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    warm = [r for r in every if r.get("kind") == "warm_start"]
    assert len(warm) == 2 and all(math.isfinite(r["warm_start/loss"]) for r in warm)
    assert (run / "checkpoints" / "warm" / "adapter").is_dir()
    records = [r for r in every if r.get("kind", "train") == "train"]
    assert [r["step"] for r in records] == [1, 2]
    training = tomllib.loads(text)["training"]
    per_step = training["rollout_batch_size"] * training["n_samples_per_prompt"]
    for r in records:
        assert r["rollouts"] == per_step and r["failed_rollouts"] == 0
        assert 0.0 <= r["tools/call_rate"] <= 1.0 and r["tools/turns_per_rollout"] >= 1.0
        assert r["samples"] > 0, r  # graded samples (sessions) reached the update
    report = out["heldout"]
    assert [m["role"] for m in report["models"]] == ["base", "warm", "trained"]
    # Both held-out files, each against base and warm start.
    assert [r["name"] for r in [report, *report["sets"]]] == ["validation", "test"]
    for each in (report, *report["sets"]):
        assert each["rows"] == 4 and each["pass_vs_warm"]["rows"] == 4
        assert all(m["tool_call_rate"] is not None for m in each["models"])
