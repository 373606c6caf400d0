"""The learning benchmark's transfer tables and targets (issue 40), from stored reports."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.benchmarks import _report
from tests.benchmarks.bench_learning import (
    TrainRun,
    _reading,
    findings_table,
    heldout_sets,
    last_fingerprint,
    measured_on,
    quiet_wall_note,
    read_run,
    readme_block,
    run_time_line,
    runs_to_show,
    stale_note,
    transfer_tables,
    transfer_targets,
)


def _set(name: str, warm: float, trained: float, low: float) -> dict[str, Any]:
    return {
        "name": name,
        "rows": 24,
        "models": [{"role": "warm", "pass_rate": warm}, {"role": "trained", "pass_rate": trained}],
        "pass_vs_warm": {"diff": trained - warm, "ci_low": low, "ci_high": 0.9},
    }


def _run(seed: int, phrasings: tuple[float, float, float], longer: float) -> TrainRun:
    report = {
        **_set("like-training", 0.3, 0.9, 0.4),
        "sets": [_set("phrasings", *phrasings), _set("longer", 0.1, longer, 0.1)],
    }
    return TrainRun(seed, f"r{seed}", "finished", 600.0, 900.0, [], heldout=report)


def test_each_file_of_a_report_in_order_and_an_old_report_as_one() -> None:
    report = _run(0, (0.2, 0.6, 0.1), 0.5).heldout
    assert [name for name, _ in heldout_sets(report)] == ["like-training", "phrasings", "longer"]
    assert [name for name, _ in heldout_sets({"rows": 24, "models": []})] == ["held-out"]
    assert heldout_sets(None) == []


def test_targets_need_every_file_and_a_clear_gain_on_new_wordings() -> None:
    assert transfer_targets(_run(0, (0.2, 0.6, 0.1), 0.5)) == {"every_file": True, "transfer": True}
    # A file under 0.5 fails the first; a gain whose CI reaches 0 fails the second.
    assert transfer_targets(_run(0, (0.2, 0.6, 0.0), 0.4)) == {
        "every_file": False,
        "transfer": False,
    }
    # +0.15 is under the +0.20 asked for, even with its CI above 0.
    assert transfer_targets(_run(0, (0.45, 0.6, 0.05), 0.5))["transfer"] is False


def test_tables_count_runs_per_file_and_label_runs_of_one_seed() -> None:
    text = transfer_tables([_run(0, (0.2, 0.6, 0.1), 0.5), _run(0, (0.3, 0.4, -0.1), 0.75)])
    row = next(line for line in text.splitlines() if line.startswith("| phrasings |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[3:] == ["0.250 (0.20–0.30)", "0.500 (0.40–0.60)", "1 of 2", "1 of 2", "1 of 2"]
    assert "| seed 0, run 1 |" in text and "| seed 0, run 2 |" in text


def test_readme_block_quotes_each_run_and_counts_targets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = [_run(0, (0.2, 0.6, 0.1), 0.5), _run(1, (0.3, 0.4, -0.1), 0.75)]
    runs[0].peak_rss_gb, runs[1].load = 5.25, (0.5, 3.0)
    runs[0].cpu, runs[0].dtype = "Intel Xeon (6/207)", "float32"
    text = readme_block(runs, ["seed 0, run 1", "seed 1, run 1"])
    assert "| 5.2 GB | Intel Xeon (6/207), float32 |" in text  # runs of several machines
    assert "| – | not recorded |" in text
    assert "| seed 0, run 1 | 0.30 → 0.90 | 0.20 → 0.60 (+0.40 [+0.10, +0.90]) | 0.10 → 0.50 |" in (
        text
    )
    assert "10.0 / 15.0 min (quiet) | 5.2 GB |" in text
    assert "(loaded) | – |" in text  # a shared machine's wall time is marked; no memory stored
    assert "CI above 0 in 1 of 2" in text and "every file at ≥ 0.50 in 1 of 2" in text
    assert "phrasings 0.40–0.60" in text
    assert (  # two precisions among the runs: the counts of each too
        "By precision: float32, the new wordings' target in 1 of 1 and every file in 1 of 1; "
        "precision not recorded, the new wordings' target in 0 of 1 and every file in 0 of 1."
    ) in text
    runs[1].dtype = "float32"
    assert "By precision" not in readme_block(runs, ["seed 0, run 1", "seed 1, run 1"])
    runs[1].dtype = None
    assert not text.startswith("**Stale:**")
    stale = readme_block(runs, ["seed 0, run 1", "seed 1, run 1"], stale_note("a", "b", "cmd"))
    assert stale.startswith("**Stale:** no run of the shipped code") and "`cmd`" in stale
    assert stale.endswith(text)
    stored = [{"status": "finished", "template": "a"}, {"status": "failed", "template": "b"}]
    assert last_fingerprint(stored) == "a"  # the last *finished* run's
    readme = tmp_path / "README.md"
    readme.write_text(
        "a\n<!-- bench:learning-readme -->\nold\n<!-- /bench:learning-readme -->\nb\n"
    )
    monkeypatch.setattr(_report, "README", readme)
    _report.write_readme_block("learning-readme", text)
    written = readme.read_text()
    assert "old" not in written and "| seed 1, run 1 |" in written
    assert written.startswith("a\n<!-- bench:learning-readme -->\n") and written.endswith("b\n")
    with pytest.raises(SystemExit, match="no '<!-- bench:other -->' block"):
        _report.write_readme_block("other", text)


def test_a_stored_run_keeps_the_precision_its_worker_trained_in(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text('{"kind": "train", "step": 1, "reward_mean": 0.5}\n')
    (tmp_path / "status.json").write_text('{"status": "finished", "dtype": "bfloat16"}')
    run = read_run(tmp_path, 0, 60.0, 90.0, None)
    assert run.status == "finished" and run.dtype == "bfloat16" and len(run.records) == 1
    assert run.machine == "not recorded, bfloat16"


def test_a_run_of_todays_code_is_current_in_either_precision() -> None:
    from tests.benchmarks.bench_learning import is_current

    fp32, bf16 = (_report.run_fingerprint("strands", d) for d in ("float32", "bfloat16"))
    assert fp32 != bf16 and is_current(fp32) and is_current(bf16)
    assert not is_current("0123456789abcdef") and not is_current(None)


def _curve(stamp: str, passes: tuple[float, float]) -> dict[str, Any]:
    points = [
        {"step": step, "minutes": 5.0 * step, "set": "phrasings", "pass_rate": rate}
        for step, rate in zip((0, 4), passes, strict=True)
    ]
    return {
        "seed": 0, "steps": 4, "every": 4, "task": "carrying a result", "template": stamp,
        "wall_s": 1500.0, "load": [0.5, 1.9], "points": points, "heldout": None, "records": [],
    }


def test_a_curve_of_todays_code_replaces_older_ones_and_names_its_precision(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from tests.benchmarks import bench_learning

    monkeypatch.setattr(bench_learning, "CURVE", tmp_path / "curve.json")
    monkeypatch.setattr(bench_learning, "CURVE_PLOT", tmp_path / "curve.png")
    bf16 = _report.run_fingerprint("strands", "bfloat16")
    old = _curve("0123456789abcdef", (0.1, 0.2))
    bench_learning.CURVE.write_text(json.dumps([old]))
    text = bench_learning.curve_section()
    # Only an older code's curve: it stays, marked stale, its precision unknown.
    assert "**Stale**" in text and "a precision not recorded" in text and "| 0.10 | 0.20 |" in text
    # Curves of the last code measured all stay (two seeds); one of code before that goes.
    older = _curve("fedcba9876543210", (0.7, 0.8))
    bench_learning.CURVE.write_text(json.dumps([older, old, {**old, "seed": 1}]))
    text = bench_learning.curve_section()
    assert text.count("| 0.10 | 0.20 |") == 2 and "| 0.70 | 0.80 |" not in text
    bench_learning.CURVE.write_text(json.dumps([old, _curve(bf16, (0.3, 0.6))]))
    text = bench_learning.curve_section()
    assert "**Stale**" not in text and "trained in bfloat16" in text
    assert "| 0.30 | 0.60 |" in text and "| 0.10 | 0.20 |" not in text
    assert (tmp_path / "curve.png").exists()


def test_a_stale_render_keeps_every_precision_of_the_last_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from tests.benchmarks import bench_learning

    # Two runs of one older code, each in its own precision (so two different fingerprints),
    # then one of an even older code stored after them: none is current.
    stored = [
        {"status": "finished", "template": "fp32-of-c1", "code": "c1"},
        {"status": "finished", "template": "bf16-of-c1", "code": "c1"},
        {"status": "failed", "template": "fp32-of-c0", "code": "c0"},
    ]
    assert last_fingerprint(stored) == "c1"
    assert [_report.code_of(m) == "c1" for m in stored] == [True, True, False]
    # A record stored before codes were kept apart is known by its fingerprint alone.
    assert _report.code_of({"template": "fp32-of-c0"}) == "fp32-of-c0"
    # The README quotes the trained-longer curve of that code (either precision), not others'.
    monkeypatch.setattr(bench_learning, "CURVE", tmp_path / "curve.json")
    curves = [
        {**_curve("bf16-of-c1", (0.1, 0.6)), "code": "c1", "dtype": "bfloat16"},
        {**_curve("fp32-of-c0", (0.1, 0.2)), "code": "c0"},
    ]
    bench_learning.CURVE.write_text(json.dumps(curves))
    run = _run(0, (0.2, 0.7, 0.3), 0.6)
    text = readme_block([run], ["seed 0, run 1"], stale_note("c1", "c2", "cmd"), "c1")
    assert text.count("Trained longer") == 1 and "bfloat16" in text.split("Trained longer")[1]
    assert "Trained longer" not in readme_block([run], ["seed 0, run 1"])  # none at HEAD


def test_the_stamp_leaves_out_only_packages_no_learning_run_imports() -> None:
    """A package left out of the code stamp must be one the rest of the trainer imports only
    lazily (inside a function or under TYPE_CHECKING), or a run could depend on it unseen."""
    import ast

    trainer = _report.ROOT / "trainer" / "osmosis_trainer"
    left_out = {f"osmosis_trainer.{name}" for name in _report.NOT_IN_LEARNING_RUNS}
    for path in trainer.rglob("*.py"):
        if path.relative_to(trainer).parts[0] in _report.NOT_IN_LEARNING_RUNS:
            continue
        for node in ast.parse(path.read_text()).body:  # the module's own top level only
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                assert not any(name == m or name.startswith(m + ".") for m in left_out), (
                    f"{path.relative_to(_report.ROOT)} imports {name} at its top level")


def test_records_of_todays_code_get_its_code_stamp_once() -> None:
    fp32, bf16 = (_report.run_fingerprint("strands", d) for d in ("float32", "bfloat16"))
    records: list[dict[str, Any]] = [
        {"template": fp32},
        {"template": bf16},
        {"template": "0123456789abcdef"},
    ]
    assert _report.backfill_code(records, "strands")
    code = _report.code_stamp("strands")
    assert [r.get("code") for r in records] == [code, code, None]
    assert not _report.backfill_code(records, "strands")  # nothing left to fill


def test_the_table_shows_the_last_codes_runs_marked_stale_until_one_of_head_is_stored() -> None:
    head = _report.run_fingerprint("strands", "float32")
    runs = [_run(0, (0.2, 0.7, 0.3), 0.6) for _ in range(3)]
    labelled = [(f"seed 0, run {i}", r) for i, r in enumerate(runs)]
    older = [
        {"status": "finished", "template": "fp32-of-c0", "code": "c0"},
        {"status": "finished", "template": "fp32-of-c1", "code": "c1"},
        {"status": "finished", "template": "bf16-of-c1", "code": "c1"},
    ]
    shown, note = runs_to_show(older, labelled)
    assert [label for label, _ in shown] == ["seed 0, run 1", "seed 0, run 2"]
    assert note.startswith("**Stale:**") and "c1" in note
    # One run of HEAD's code is enough: the table lists it alone, with no note.
    current = [*older[:2], {"status": "finished", "template": head}]
    shown, note = runs_to_show(current, labelled)
    assert [label for label, _ in shown] == ["seed 0, run 2"] and note == ""


def test_the_quiet_wall_estimate_names_only_loaded_runs_the_table_shows() -> None:
    loaded, quiet = (_run(seed, (0.2, 0.6, 0.1), 0.5) for seed in (0, 1))
    loaded.load, quiet.load = (2.5, 2.1), (0.3, 1.6)
    stored = [{"load": [0.3, 1.6], "wall_s": 600.0, "cpu_s": 1000.0}]
    note = quiet_wall_note([("seed 0, run 1", loaded), ("seed 1, run 1", quiet)], stored)
    # CPU time 900 s x (600 / 1000) = 9.0 min; a quiet run needs no estimate.
    assert "seed 0, run 1 ≈ 9.0 min" in note
    assert "seed 1" not in note
    assert quiet_wall_note([("seed 1, run 1", quiet)], stored) == ""


def _probe(**extra: Any) -> dict[str, Any]:
    return {
        "name": "a probe",
        "template": "strands",
        "settings": {"training.dtype": '"float32"'},
        "steps": 8,
        "first3": 0.1,
        "last3": 0.3,
        "zero_variance_share": 0.1,
        "truncated_share": 0.05,
        "cpu_s_per_step": 200.0,
        "heldout": None,
        **extra,
    }


def test_a_probe_row_names_its_cpu_and_precision_or_says_not_recorded() -> None:
    table = findings_table([_probe(cpu="AMD EPYC (25/17)", dtype="float32"), _probe()])
    recorded, old = table.splitlines()[2:4]
    assert recorded.endswith("| AMD EPYC (25/17), float32 |")
    assert old.endswith("| not recorded |")


def _mismatch(kl: float, low: float, high: float) -> dict[str, Any]:
    return _probe(mismatch_kl_max=kl, is_ratio_min=low, is_ratio_max=high)


def test_the_mismatch_line_says_what_the_capped_weights_do_from_the_measured_ratios() -> None:
    exact = _reading([_mismatch(1e-10, 0.9999, 1.0001)], [])
    assert "not a logprob mismatch" in exact
    under = _reading([_mismatch(1e-3, 0.23, 2.55)], [])
    assert "0.2300–2.5500" in under and "capped at 3 (none reached it)" in under
    assert "not the noise" in under
    over = _reading([_mismatch(1e-3, 0.23, 2.55), _mismatch(2e-3, 0.5, 4.2)], [])
    assert "some ratios were cut to the cap" in over
    assert "bias in expectation" in under and "bias in expectation" not in over
    assert "the cut tokens keep some" in over and "the cut tokens" not in under


def test_measured_on_names_the_runs_machines_and_latest_start_not_the_renderer() -> None:
    entries = [
        {"run": "/tmp/qs-0/runs/calc-20261202-090645", "cpu": "AMD EPYC (25/17)"},
        {"run": "/tmp/qs-1/runs/calc-20261201-212011", "cpu": "Intel Xeon (6/207)"},
        {"run": "/tmp/qs-2/runs/calc-20261202-170851", "cpu": "AMD EPYC (25/17)"},
    ]
    machines, latest = measured_on(entries)
    assert machines == "AMD EPYC (25/17) (2 runs); Intel Xeon (6/207) (1 run)"
    assert latest == "2026-12-02 17:08 UTC"
    assert measured_on([{"run": "elsewhere"}]) == ("CPU not recorded (1 run)", None)


def test_the_run_time_line_gives_each_machine_its_span_and_counts_loaded_runs() -> None:
    runs = [_run(0, (0.2, 0.6, 0.1), 0.5), _run(1, (0.3, 0.4, -0.1), 0.75),
            _run(2, (0.3, 0.4, -0.1), 0.75)]
    for run, wall in zip(runs, (900.0, 1140.0, 2000.0), strict=True):
        run.wall_s, run.cpu = wall, "AMD EPYC (25/17)"
    runs[0].dtype = runs[1].dtype = "bfloat16"
    runs[2].dtype, runs[2].load, runs[2].peak_rss_gb = "float32", (1.0, 2.4), 8.04
    runs[1].peak_rss_gb = 5.9
    line = run_time_line(runs)
    assert line == (
        "15–19 min on AMD EPYC (25/17), bfloat16 (2 runs, worker peak 5.9 GB); "
        "33 min on AMD EPYC (25/17), float32 (1 run, 1 of them on a loaded machine, "
        "worker peak 8.0 GB)."
    )
    assert run_time_line(runs, "stale").startswith("runs of an earlier code (stale): ")
    assert "no run of the shipped code" in run_time_line([])
