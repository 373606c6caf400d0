"""The trainer section is rendered from its stored sitting alone: the verdicts follow the
stored runs."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from tests.benchmarks import _stored as _stored_mod
from tests.benchmarks import bench_trainer
from tests.benchmarks._scratch import render_stored

CODE = ["tests/benchmarks/_stored.py"]


def _render(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: dict[str, Any]) -> str:
    return render_stored(tmp_path, monkeypatch, "trainer", data, bench_trainer.render)


def _result(step: float, rss: float, who: str) -> dict[str, Any]:
    ours = who == "ours"
    return asdict(
        bench_trainer.Result(
            step_s=step,
            tokens_per_step=1000.0,
            peak_rss_gb=rss,
            rollout_s=step / 2 if ours else None,
            update_s=step / 2 if ours else None,
            cpu_s=step * 1.5,
            dtype="bfloat16" if ours else "float32",
        )
    )


def _sitting(tiny_ours: float, rounds: int = 3, cuda: bool = False) -> dict[str, Any]:
    """Both CPU cases: TRL 1.0 s per step; ours ``tiny_ours`` (tiny) and 0.3 s (small), rollouts
    ahead 0.9x ours; round 2 is 10 % slower for every row."""
    plan = [(case, bench_trainer._cpu_setups()) for case in bench_trainer.CPU_CASES]
    runs = []
    for case, setups in plan:
        ours = tiny_ours if case.name == "tiny" else 0.3
        steps = [ours, ours * 0.9, 1.0]
        for done in range(1, rounds + 1):
            slow = 1.1 if done == 2 else 1.0
            for i, setup in enumerate(setups):
                runs.append(
                    {"case": case.name, "row": i, "label": setup.label, "round": done,
                     "result": _result(steps[i] * slow, 0.5 if i < 2 else 1.0, setup.who),
                     "load": 1.0}
                )
    return {
        "command": bench_trainer.COMMAND,
        "machine": "a CPU",
        "commit": "abc",
        "code": CODE,
        "fingerprint": _stored_mod.fingerprint(CODE),
        "uncommitted": [],
        "started": "2026-12-01 10:00 UTC",
        "ended": "2026-12-01 11:00 UTC",
        "load_at_start": "0.1 / 0.1 / 0.1 (1 / 5 / 15 min) on 2 vCPUs",
        "rounds": rounds,
        "cuda": cuda,
        "load_1min": 0.1,
        "cpus": 96,
        "trl": "1.16.0",
        "openmp": {"ours": {"OMP_WAIT_POLICY": "ACTIVE", "GOMP_SPINCOUNT": "100000"},
                   "libraries": {}},
        "cases": [
            {"case": asdict(case), "setups": [asdict(s) for s in setups], "rounds": rounds}
            for case, setups in plan
        ],
        "runs": runs,
    }


def test_trainer_verdicts_come_from_the_stored_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _render(tmp_path, monkeypatch, _sitting(tiny_ours=4.4))
    assert "**stale**" not in text
    assert "- tiny: on-policy step = **4.40x** TRL's (median of 3 vs 3 runs; target <= 0.40x: " \
        "NOT met; CPU seconds per step 4.40x)" in text
    assert "- small: on-policy step = **0.30x** TRL's (median of 3 vs 3 runs; target <= 0.40x: " \
        "met;" in text
    assert "**tiny** (Qwen2 hidden 64, 2 layers, random init; 8 prompts x 4 samples x up to 32 " \
        "new tokens; cpu; 2 warm-up + 40 timed steps per run; median of 3 run(s) per row)" in text
    assert "| osmosis, on-policy (defaults) | 0.300 s | 0.45 | 0.15 s / 0.15 s | 1000 | 3333 " \
        "| 0.30x | 0.50 GB | 0.50x | 0.30, 0.33, 0.30 |" in text
    assert "| TRL GRPOTrainer | 1.000 s | 1.50 | - | 1000 | 1000 | 1.00x | 1.00 GB | 1.00x " in text
    assert "_No CUDA device on this machine: the GPU comparison did not run._" in text
    assert "TRL 1.16.0 (`GRPOTrainer`" in text and "resolves to bfloat16 base weights" in text
    assert "OpenMP: ours `OMP_WAIT_POLICY=ACTIVE`, `GOMP_SPINCOUNT=100000`" in text
    assert "the libraries' runs libgomp's defaults (none set)" in text
    assert "Nothing else was running when this started (1-minute load average 0.1 on 96 " in text
    assert "- Date: 2026-12-01 10:00 UTC to 2026-12-01 11:00 UTC" in text


def test_trainer_says_stale_and_decides_no_case_with_a_row_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _sitting(tiny_ours=0.3)
    data["runs"] = [r for r in data["runs"] if r["case"] == "tiny" or r["row"] != 0]
    data["fingerprint"] = "0" * 16  # the measured code changed since
    text = _render(tmp_path, monkeypatch, data)
    assert "- tiny: on-policy step = **0.30x** TRL's" in text and "0.40x: met;" in text
    assert "- small: no verdict: not every row has a run yet." in text
    assert "**stale**: the code this section measures" in text


def test_trainer_with_a_case_not_yet_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = _sitting(tiny_ours=0.3, rounds=1)
    data["runs"] = [r for r in data["runs"] if r["case"] == "tiny"][:2]
    text = _render(tmp_path, monkeypatch, data)
    assert "- tiny: no verdict: not every row has a run yet." in text
    assert "**small**: no run stored yet." in text and "met" not in text


def test_trainer_gpu_case_is_a_table_without_a_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _sitting(tiny_ours=0.3, cuda=True)
    gpu = bench_trainer.GPU_CASE
    setups = [bench_trainer.Setup("osmosis (hf engine), on-policy"),
              bench_trainer.Setup("TRL GRPOTrainer", who="trl", threads=1)]
    data["cases"].append(
        {"case": asdict(gpu), "setups": [asdict(s) for s in setups], "rounds": 1}
    )
    data["runs"] += [
        {"case": gpu.name, "row": i, "label": s.label, "round": 1,
         "result": _result(step, 2.0, s.who), "load": 1.0}
        for i, (s, step) in enumerate(zip(setups, (2.0, 4.0), strict=True))
    ]
    text = _render(tmp_path, monkeypatch, data)
    assert "**0.5B-class** (Qwen2 hidden 1536, 20 layers" in text and "; cuda;" in text
    assert "| osmosis (hf engine), on-policy | 2.000 s |" in text and "| 0.50x |" in text
    assert "No CUDA device" not in text and "- 0.5B-class" not in text
