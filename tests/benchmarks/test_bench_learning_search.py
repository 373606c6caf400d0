"""The search benchmark's reading counts, on hand-written conversations."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.benchmarks import bench_learning_search
from tests.benchmarks.bench_learning import shipped_steps
from tests.benchmarks.bench_learning_search import reading


def _conversation(*reads: str) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "What is the price of X?"}]
    search = {"name": "search", "arguments": json.dumps({"query": "X"})}
    messages += [
        {"role": "assistant", "tool_calls": [{"id": "s", "type": "function", "function": search}]},
        {"role": "tool", "tool_call_id": "s", "content": "D200: X Pro (Pro.)\nD100: X (Std.)"},
    ]
    for i, doc_id in enumerate(reads):
        read = {"name": "read", "arguments": json.dumps({"doc_id": doc_id})}
        call = {"id": f"r{i}", "type": "function", "function": read}
        messages += [
            {"role": "assistant", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"r{i}", "content": "..."},
        ]
    messages.append({"role": "assistant", "content": "$5"})
    return messages


def test_reading_counts_reads_right_documents_and_first_result_habit() -> None:
    samples = [
        (_conversation("D200"), "D100"),  # the first result, the wrong one
        (_conversation("D200", "d100"), "D100"),  # then the right one
        (_conversation("D100"), "D100"),  # the right one at once
        (_conversation(), "D100"),  # no read
        (_conversation("D300"), "D100"),  # an id no result showed
    ]
    assert reading(samples) == {
        "rollouts": 5.0,
        "reads_per_rollout": 1.0,
        "right_doc_rate": 0.4,
        "first_result_rate": 0.4,
        "unlisted_read_rate": 0.2,
    }
    assert reading([]) == {}


def test_readme_block_quotes_runs_of_the_shipped_files_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def run(seed: int, template: str, trained: float) -> dict[str, Any]:
        models = [("base", 0.0), ("warm", 0.2), ("trained", trained)]
        return {
            "seed": seed,
            "status": "finished",
            "template": template,
            "wall_s": 1500.0,
            "load": [0.5, 1.0],
            "peak_rss_gb": 6.0,
            "heldout": {
                "models": [{"role": r, "pass_rate": p} for r, p in models],
                "pass_vs_warm": {"diff": trained - 0.2, "ci_low": 0.1, "ci_high": 0.5},
            },
            "heldout_reading": {},
        }

    runs = tmp_path / "runs.json"
    runs.write_text(json.dumps([run(0, "old", 0.9), run(1, "now", 0.6), run(1, "now", 0.3)]))
    monkeypatch.setattr(bench_learning_search, "RUNS", runs)
    monkeypatch.setattr(bench_learning_search, "template_fingerprint", lambda: "now")
    text = bench_learning_search.readme_block()
    # One held-out file (older runs): it stands for the test file, no validation figures.
    assert "| 1 | 1 | – / – / – | 0.00 / 0.20 / 0.60 | +0.40 [+0.10, +0.50] |" in text
    assert "| 1 | 2 | – / – / – | 0.00 / 0.20 / 0.30 | +0.10 [+0.10, +0.50] |" in text
    assert "25.0 min (quiet) | 6.0 GB |" in text
    assert "| 0 |" not in text  # the stale run is not quoted
    assert "Targets over 2 runs (1 of 3 seeds" in text and "CI above 0 in 1;" in text
    assert "By precision" not in text  # one precision (none recorded): no split
    both = [run(1, "now", 0.6), {**run(1, "now", 0.3), "dtype": "bfloat16"}]
    runs.write_text(json.dumps(both))
    assert (
        "By precision: precision not recorded, +0.20 with the CI above 0 in 1 of 1 and "
        "pass ≥ 0.50 in 1 of 1 and under 20 min in 0 of 1; bfloat16, +0.20 with the CI above 0 "
        "in 0 of 1 and pass ≥ 0.50 in 0 of 1 and under 20 min in 0 of 1."
    ) in bench_learning_search.readme_block()
    runs.write_text(json.dumps([run(0, "old", 0.9), run(1, "now", 0.6), run(1, "now", 0.3)]))
    # Nothing stored at HEAD: the runs of the last fingerprint stored, marked stale.
    monkeypatch.setattr(bench_learning_search, "template_fingerprint", lambda: "next")
    monkeypatch.setattr(bench_learning_search, "code_stamp", lambda template: "next")
    text = bench_learning_search.readme_block()
    assert text.startswith("**Stale:**") and "(fingerprint now, HEAD's is next)" in text
    assert "| 1 | 1 |" in text and "| 1 | 2 |" in text and "| 0 |" not in text
    # Runs of that code in both precisions (two fingerprints, one code) are quoted together.
    fp32, bf16 = run(1, "c-fp32", 0.6), {**run(1, "c-bf16", 0.3), "dtype": "bfloat16"}
    runs.write_text(json.dumps([{**fp32, "code": "c"}, {**bf16, "code": "c"}]))
    text = bench_learning_search.readme_block()
    assert "(fingerprint c, HEAD's is next)" in text and "| 1 | 2 |" in text


def test_store_keeps_runs_of_a_seed_at_one_fingerprint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bench_learning_search, "RUNS", tmp_path / "runs.json")

    def stored() -> list[tuple[int, str, str]]:
        data = json.loads((tmp_path / "runs.json").read_text())
        return [(r["seed"], r["template"], r["run"]) for r in data]

    store = bench_learning_search._store
    store({"seed": 0, "template": "old", "run": "a"})
    store({"seed": 1, "template": "old", "run": "b"})
    store({"seed": 0, "template": "new", "run": "c"})  # replaces seed 0's run of other code
    store({"seed": 0, "template": "new", "run": "d"})  # a second run of the same code stays
    assert stored() == [(1, "old", "b"), (0, "new", "c"), (0, "new", "d")]
    numbers = [
        (n, r["run"])
        for n, r in bench_learning_search.numbered(json.loads((tmp_path / "runs.json").read_text()))
    ]
    assert numbers == [(1, "c"), (2, "d"), (1, "b")]


def test_targets_are_judged_on_the_test_file_not_the_validation_file() -> None:
    def report(name: str, warm: float, trained: float, low: float) -> dict[str, Any]:
        models = [("base", 0.0), ("warm", warm), ("trained", trained)]
        return {
            "name": name,
            "models": [{"role": r, "pass_rate": p} for r, p in models],
            "pass_vs_warm": {"diff": trained - warm, "ci_low": low, "ci_high": 0.6},
        }

    validation = report("validation", 0.3, 0.4, -0.1)
    test = report("test", 0.3, 0.6, 0.05)
    run = {
        "wall_s": 600.0,
        "heldout": {**validation, "sets": [test]},
        "set_reading": {"validation": {"warm": {"right_doc_rate": 0.1}}, "test": {}},
    }
    assert bench_learning_search.held(run)[0]["name"] == "test"
    assert bench_learning_search.held(run, "validation")[1] == {"warm": {"right_doc_rate": 0.1}}
    assert bench_learning_search.targets(run) == {"over_warm": True, "pass": True, "wall": True}
    run["heldout"] = {**test, "sets": [validation]}  # the order of the files does not matter
    assert bench_learning_search.targets(run)["over_warm"]


def test_the_table_states_the_templates_own_share_of_first_results() -> None:
    """The section's text reads the RL rows' share from the template, so it cannot drift from it."""
    from tests.benchmarks.bench_learning_search import _train_first

    assert re.fullmatch(r"\d+ of \d+", _train_first()), _train_first()


def test_store_keeps_a_run_of_the_same_code_in_the_other_precision(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.benchmarks import _report

    monkeypatch.setattr(bench_learning_search, "RUNS", tmp_path / "runs.json")
    fp32, bf16 = (
        _report.run_fingerprint(bench_learning_search.TEMPLATE, d) for d in ("float32", "bfloat16")
    )
    store = bench_learning_search._store
    store({"seed": 0, "template": "old", "run": "a"})
    store({"seed": 0, "template": fp32, "run": "b"})  # other code: "a" goes
    store({"seed": 0, "template": bf16, "run": "c"})  # same code on a bf16 CPU: "b" stays
    runs = json.loads((tmp_path / "runs.json").read_text())
    assert [r["run"] for r in runs] == ["b", "c"]


def test_a_search_curve_is_shown_per_held_out_file_with_its_precision(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bench_learning_search, "CURVE", tmp_path / "curve.json")
    monkeypatch.setattr(bench_learning_search, "CURVE_PLOT", tmp_path / "curve.png")
    monkeypatch.setattr(bench_learning_search, "template_fingerprint", lambda: "now")
    assert bench_learning_search.curve_part() == ""  # nothing measured: no paragraph
    points = [
        {"step": step, "minutes": 1.0 + 4.0 * step, "set": name, "pass_rate": rate}
        for step, rates in ((0, (0.25, 0.5)), (4, (0.5, 0.75)))
        for name, rate in zip(("validation", "test"), rates, strict=True)
    ]
    curve = {
        "seed": 1, "steps": 4, "every": 4, "template": "now", "wall_s": 900.0,
        "load": [0.2, 1.5], "dtype": "bfloat16", "points": points, "heldout": None,
    }
    bench_learning_search.CURVE.write_text(json.dumps([curve]))
    text = bench_learning_search.curve_part()
    shipped = shipped_steps(template="search", name="kb")
    assert f"Seed 1, 4 RL steps (the shipped config runs {shipped})" in text
    assert "trained in bfloat16; the whole run took 15.0 min" in text
    assert "| warm start (1.0 min) | step 4 (17.0 min) |" in text
    assert "| validation | 0.25 | 0.50 |" in text and "| test | 0.50 | 0.75 |" in text
    assert "**Stale**" not in text and (tmp_path / "curve.png").exists()


def test_checkpoint_points_evaluate_the_warm_start_and_each_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.benchmarks import bench_learning

    calls: list[list[str]] = []

    def fake_osmosis(args: list[str], cwd: Path) -> Any:
        calls.append(args)
        out = tmp_path / f"eval{len(calls)}"
        out.mkdir()
        (out / "summary.json").write_text(json.dumps({"pass_rate": len(calls) / 10}))
        return type("Done", (), {"stdout": json.dumps({"run_dir": str(out)})})()

    monkeypatch.setattr(bench_learning, "_osmosis", fake_osmosis)
    warm = [{"time": 100.0}]
    records = [
        {"step": s, "time": 100.0 + 60.0 * (s + 1), "step_time_s": 60.0} for s in (1, 2, 3, 4)
    ]
    points = bench_learning.checkpoint_points(
        tmp_path, "configs/eval/kb.toml", ("/runs/kb-1", records, warm),
        [("validation", "v.jsonl"), ("test", "t.jsonl")], (4, 2),
    )
    assert [c[calls[0].index("--model") + 1] for c in calls] == [
        "kb-1:warm", "kb-1:warm", "kb-1:2", "kb-1:2", "kb-1:4", "kb-1:4"
    ]
    assert [(p["step"], p["set"], p["minutes"]) for p in points] == [
        (0, "validation", 1.0), (0, "test", 1.0), (2, "validation", 3.0), (2, "test", 3.0),
        (4, "validation", 5.0), (4, "test", 5.0),
    ]
    assert [p["pass_rate"] for p in points] == [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
