"""The benchmark helpers that decide what BENCHMARKS.md says: the machine line, the spread of
runs, and the paired verdict of a speed path against its library alternative."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from tests.benchmarks import _report, bench_trainer_real
from tests.benchmarks import _stored as _stored_mod
from tests.benchmarks._scratch import render_stored
from tests.benchmarks.bench_trainer import PathCheck, Result, Row, Setup

_CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC 9R14
stepping\t: 1
siblings\t: 2
cpu cores\t: 1
flags\t\t: fpu avx2 avx512f avx512bw avx512_bf16 avx512_vnni

processor\t: 1
model name\t: something else
"""


def test_cpu_info_names_family_model_flags_and_hyperthreads() -> None:
    line = _report.cpu_info(_CPUINFO)
    assert line.startswith("AMD EPYC 9R14 (family 25 model 17 stepping 1; ")
    assert "avx2 avx512f avx512_bf16 avx512_vnni;" in line
    assert "amx" not in line
    assert "2 thread(s) per core" in line


def test_cpu_info_without_the_flags_says_so() -> None:
    line = _report.cpu_info("model name\t: Old CPU\nflags\t: fpu sse2\n")
    assert "none of avx2/avx512f" in line


def test_cpu_short_is_vendor_line_and_family_model() -> None:
    assert _report.cpu_short(_CPUINFO) == "AMD EPYC 9R14 (25/17)"
    intel = "model name\t: Intel(R) Xeon(R) Processor\ncpu family\t: 6\nmodel\t\t: 207\n"
    assert _report.cpu_short(intel) == "Intel Xeon (6/207)"


def test_load_note_says_shared_only_when_the_load_before_the_run_says_so() -> None:
    quiet = _report.load_note(0.2, cores=2)
    busy = _report.load_note(1.4, cores=2)
    assert quiet.startswith("Nothing else was running") and "0.2 on 2 cores" in quiet
    assert busy.startswith("Other work was running") and "1.4 on 2 cores" in busy
    assert "not with other sections" in busy and "other sections" not in quiet


def test_spread_is_median_min_max() -> None:
    assert _report.spread([3.0, 1.0, 2.0]) == "2.00 [1.00-3.00]"
    assert _report.spread([1.5]) == "1.50"
    assert _report.spread([]) == "-"


def test_write_section_records_the_load_and_keeps_other_sections(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = tmp_path / "BENCHMARKS.md"
    report.write_text(
        "# B\n\n<!-- bench:a -->\nold a\n<!-- /bench:a -->\n\n<!-- bench:b -->\nb\n<!-- /bench:b -->\n"
    )
    monkeypatch.setattr(_report, "REPORT", report)
    _report.write_section("a", "A", "new a", "cmd", load_at_start="9.0 / 9.0 / 9.0")
    text = report.read_text()
    assert "old a" not in text and "new a" in text and "<!-- bench:b -->\nb\n" in text
    assert "- Load average: at start 9.0 / 9.0 / 9.0; at end " in text
    assert "- Machine: " in text and "torch " in text


def _row(label: str, steps: list[float], cpus: list[float]) -> Row:
    return Row(
        Setup(label),
        [
            Result(step_s=s, tokens_per_step=1.0, peak_rss_gb=1.0, cpu_s=c)
            for s, c in zip(steps, cpus, strict=True)
        ],
    )


def test_path_check_pairs_rounds_and_keeps_a_path_only_past_ten_percent() -> None:
    ours = _row("ours", [10.0, 20.0, 10.0], [10.0, 20.0, 10.0])
    # Round 2 was slow for both rows: paired ratios are 1.2 each round, unpaired medians agree.
    library = _row("eager", [12.0, 24.0, 12.0], [12.0, 24.0, 12.0])
    line = PathCheck("attention", ours, library, library="transformers' eager").line()
    assert "wall 1.20 [1.20-1.20]x" in line
    assert "stays: beats transformers' eager by >= 10 %" in line
    close = _row("sdpa", [10.5, 21.0, 10.5], [10.5, 21.0, 10.5])
    line = PathCheck("attention", ours, close, library="transformers' SDPA").line()
    assert "does NOT beat transformers' SDPA by 10 %" in line


def test_unknown_row_key_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OSMOSIS_BENCH_ROWS", "ours,trl_defaults,nope")
    with pytest.raises(SystemExit, match="nope"):
        bench_trainer_real._row_keys()
    monkeypatch.setenv("OSMOSIS_BENCH_ROWS", "ours")
    with pytest.raises(SystemExit, match="trl_defaults"):
        bench_trainer_real._row_keys()
    monkeypatch.delenv("OSMOSIS_BENCH_ROWS")
    assert bench_trainer_real._row_keys() == list(bench_trainer_real.DEFAULT_ROWS)


def _stored(rounds: int, code: list[str]) -> dict[str, Any]:
    """A sitting as ``Sitting.record`` stores it: ours 10 s, TRL defaults 30 s, TRL bf16 25 s
    (its fastest), ours with small micro-batches 11 s; RSS 2.0 / 2.2 vs 5.0 GB."""
    figures = {
        "ours": (10.0, 2.0),
        "ours_micro512": (11.0, 1.5),
        "trl_defaults": (30.0, 5.0),
        "trl_bf16": (25.0, 8.0),
    }
    runs = [
        {
            "row": key,
            "round": i,
            "load": 1.0,
            "result": {
                "step_s": step * (1 + i / 10),
                "tokens_per_step": 1500.0,
                "peak_rss_gb": rss,
                "cpu_s": step * 1.5,
            },
        }
        for i in range(1, rounds + 1)
        for key, (step, rss) in figures.items()
    ]
    setups = {k: asdict(bench_trainer_real.ROWS[k]) for k in figures}
    return {
        "command": "cmd",
        "machine": "a CPU",
        "commit": "abc",
        "code": code,
        "fingerprint": _stored_mod.fingerprint(code),
        "uncommitted": [],
        "started": "2026-11-27 18:00 UTC",
        "ended": "2026-11-27 19:00 UTC",
        "load_at_start": "1.0",
        "rows": list(figures),
        "rounds": 3,
        "case": asdict(bench_trainer_real._case()),
        "setups": setups,
        "runs": runs,
    }


def _render(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: dict[str, Any]) -> str:
    return render_stored(tmp_path, monkeypatch, "trainer_real", data, bench_trainer_real.render)


def test_trainer_real_verdicts_come_from_the_stored_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code = ["tests/benchmarks/_stored.py"]
    text = _render(tmp_path, monkeypatch, _stored(3, code))
    assert "**stale**" not in text
    assert "fastest setting measured here: **TRL, bf16=True autocast" in text
    assert "TRL's fastest = **0.40x** wall" in text and "Target <= 0.40x: met." in text
    # memory against TRL's defaults (5.0 GB), not against the fastest row
    assert "(defaults): peak RSS / TRL's defaults' = **0.40x**, paired by round" in text
    assert "(medians 2.00 GB of 3 run(s) vs 5.00 GB)" in text
    assert "micro-batches: peak RSS / TRL's defaults' = **0.30x**" in text
    assert "costs 1.10x the defaults' wall" in text
    assert "- Date: 2026-11-27 18:00 UTC to 2026-11-27 19:00 UTC" in text


def test_trainer_real_needs_three_rounds_and_says_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _stored(2, ["tests/benchmarks/_stored.py"])
    data["fingerprint"] = "0" * 16  # the code changed since
    text = _render(tmp_path, monkeypatch, data)
    assert text.count("not decided (2 complete round(s), 3 needed)") == 3
    assert "met." not in text
    assert "**stale**: the code this section measures" in text


def test_merge_section_says_which_merge_is_exact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.benchmarks import bench_merge

    exact = {
        "swap_s": 0.07,
        "served_err_ulp": 0.0,
        "served_diff_share": 0.0,
        "drift_ulp": 0.0,
        "drift_share": 0.0,
    }
    drifted = {
        "swap_s": 0.21,
        "served_err_ulp": 1.0,
        "served_diff_share": 0.034,
        "drift_ulp": 80.0,
        "drift_share": 0.037,
    }
    runs = [
        {"row": row, "round": r, "load": 1.0, "result": result}
        for r in range(3)
        for row, result in (("ours", exact), ("peft", drifted))
    ]
    data = {
        "command": "python -m tests.benchmarks merge",
        "machine": "a CPU",
        "commit": "abc",
        "code": ["tests/benchmarks/_stored.py"],
        "uncommitted": [],
        "fingerprint": _stored_mod.fingerprint(["tests/benchmarks/_stored.py"]),
        "started": "2026-11-27 18:00 UTC",
        "load_at_start": "1.0",
        "rounds": 3,
        "runs": runs,
    }
    store = tmp_path / "store"
    store.mkdir()
    (store / "merge.json").write_text(json.dumps(data))
    monkeypatch.setattr(_stored_mod, "STORE", store)
    monkeypatch.setattr(_report, "REPORT", tmp_path / "BENCHMARKS.md")
    bench_merge.render()
    text = (tmp_path / "BENCHMARKS.md").read_text()
    assert "originals kept): serves the exact merge and never changes the base weights." in text
    assert "in place): serves 3.40% of the weights off the exact merge; 3.70% of the base" in text
    assert "paired by round: 3.00x, 3.00x, 3.00x" in text and "**stale**" not in text


def test_trainer_real_with_a_row_not_yet_run_writes_no_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _stored(1, ["tests/benchmarks/_stored.py"])
    data["runs"] = [r for r in data["runs"] if r["row"] != "trl_bf16"]
    text = _render(tmp_path, monkeypatch, data)
    assert "- No verdicts: not every row has a finished run yet." in text
    assert "0 complete interleaved round(s) of 3" in text and "met" not in text


def test_a_run_that_ended_on_other_code_makes_the_section_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _stored(3, ["tests/benchmarks/_stored.py"])
    data["runs"][-1]["fingerprint"] = "f" * 16  # the code changed while the sitting ran
    text = _render(tmp_path, monkeypatch, data)
    assert "**stale**" in text and f"runs ended on other code too ({'f' * 16})" in text


@pytest.mark.parametrize("with_git", [True, False])
def test_a_fingerprint_leaves_out_an_excluded_folder(
    with_git: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The training sections leave out the Ray package (a single-process run never loads it),
    with git's list of files and without git alike."""
    if not with_git:
        monkeypatch.setattr(_stored_mod, "git", lambda *args: None)
    code = ["trainer/osmosis_trainer", ":!trainer/osmosis_trainer/distributed",
            "tests/benchmarks/bench_trainer.py"]
    files = _stored_mod._files(code)
    assert "trainer/osmosis_trainer/loop/_update.py" in files
    assert "tests/benchmarks/bench_trainer.py" in files
    assert not [f for f in files if f.startswith("trainer/osmosis_trainer/distributed/")]
    assert [f for f in _stored_mod._files(code[:1]) if "/distributed/" in f]


def test_behaviour_bytes_ignore_comments_and_docstrings_not_code(tmp_path: Path) -> None:
    def of(name: str, text: str) -> bytes:
        path = tmp_path / name
        path.write_text(text)
        return _report.behaviour_bytes(path)

    code = 'def f(x):\n    """Doubles."""\n    return 2 * x  # twice\n'
    same = 'def f(x):\n    """Twice x: a new docstring."""\n    # a new comment\n    return 2 * x\n'
    assert of("a.py", code) == of("b.py", same)
    assert of("a.py", code) != of("c.py", code.replace("2 * x", "3 * x"))
    table = '[training]\n# four steps\nmax_steps = 4\nname = "{{name}}"\n'
    assert of("a.toml", table) == of("b.toml", table.replace("# four steps", "# more"))
    assert of("a.toml", table) != of("c.toml", table.replace("= 4", "= 5"))
    assert of("bad.toml", "x = {{name}}\n") == b"x = {{name}}\n"  # unparseable: as is
    assert of("d.jsonl", '{"a": 1}\n') == b'{"a": 1}\n'


def test_trainer_real_readme_block_quotes_the_verdicts_not_the_paths() -> None:
    data = {"started": "2026-11-28 19:28 UTC", "machine": "AMD EPYC (2 vCPUs), torch 2.13.0+cpu"}
    verdicts = ["- Step: ours / TRL's fastest = **0.63x**", "- Path: prompt head: pays."]
    text = bench_trainer_real.readme_block(data, 3, verdicts)
    assert text.startswith("Last sitting (2026-11-28 19:28 UTC, 3 interleaved round(s), AMD EPYC")
    assert "torch" not in text.splitlines()[0]
    assert "**0.63x**" in text and "- Path:" not in text


def _sitting_file(store: Path, name: str, runs: list[dict[str, Any]], **extra: Any) -> None:
    code = ["tests/benchmarks/_stored.py"]
    data = {
        "command": f"python -m tests.benchmarks {name}",
        "machine": "a CPU",
        "commit": "abc",
        "code": code,
        "uncommitted": [],
        "fingerprint": _stored_mod.fingerprint(code),
        "started": "2026-11-30 03:00 UTC",
        "load_at_start": "0.2 / 0.3 / 0.4 (1 / 5 / 15 min) on 2 vCPUs",
        "runs": runs,
        **extra,
    }
    store.mkdir(exist_ok=True)
    (store / f"{name}.json").write_text(json.dumps(data))


def test_hostile_bar_fails_on_any_5xx_and_a_missing_sitting_says_how_to_make_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.benchmarks import bench_hostile

    monkeypatch.setattr(_stored_mod, "STORE", tmp_path / "store")
    monkeypatch.setattr(_report, "REPORT", tmp_path / "BENCHMARKS.md")
    bench_hostile.render()
    assert "it stores `docs/benchmarks/hostile.json`" in (tmp_path / "BENCHMARKS.md").read_text()
    server = {
        "name": "s",
        "sent": 3,
        "tracebacks": 0,
        "rss_before_mb": 1.0,
        "rss_mid_mb": 2.0,
        "rss_after_mb": 2.0,
    }
    _sitting_file(tmp_path / "store", "hostile", [{**server, "answers": {"400": 3}}])
    bench_hostile.render()
    assert "both servers): met" in (tmp_path / "BENCHMARKS.md").read_text()
    _sitting_file(tmp_path / "store", "hostile", [{**server, "answers": {"400": 2, "500": 1}}])
    bench_hostile.render()
    text = (tmp_path / "BENCHMARKS.md").read_text()
    assert "both servers): NOT met" in text and "| s | 3 | 400: 2, 500: 1 | 1 | 0 | 0 |" in text
