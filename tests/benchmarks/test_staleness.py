"""``python -m tests.benchmarks stale``: every section re-rendered from its stored results."""

from __future__ import annotations

import importlib
import inspect
import json
from pathlib import Path

import pytest

from tests.benchmarks import _report
from tests.benchmarks import _stored as _stored_mod
from tests.benchmarks._staleness import OWN_STORES, rerender, stale_sections

_BENCHES = sorted(p.stem.removeprefix("bench_") for p in Path(__file__).parent.glob("bench_*.py"))


def _gateway_sitting(fingerprint: str) -> dict[str, object]:
    run = {
        "direct_median": 0.07, "gateway_median": 1.5, "gateway_p90": 2.0, "gateway_p99": 2.5,
        "overhead_median": 1.43, "calls_per_s": 500.0, "at": "2026-11-30 05:30 UTC",
        "load": 1.0, "fingerprint": fingerprint,
    }
    return {
        "command": "python -m tests.benchmarks gateway", "machine": "m", "commit": "abc1234",
        "code": ["tests/benchmarks/bench_gateway.py"], "fingerprint": fingerprint,
        "started": "2026-11-30 05:30 UTC", "load_at_start": "1.0", "runs": [run],
        "calls": 1000, "clients": 16,
    }


def test_stored_sections_are_rerendered_and_a_changed_one_says_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, report = tmp_path / "store", tmp_path / "BENCHMARKS.md"
    store.mkdir()
    monkeypatch.setattr(_stored_mod, "STORE", store)
    monkeypatch.setattr(_report, "REPORT", report)
    now = _stored_mod.fingerprint(["tests/benchmarks/bench_gateway.py"])
    (store / "gateway.json").write_text(json.dumps(_gateway_sitting(now)))
    # runner has no stored sitting here: it is left alone, not rewritten as "no results".
    assert rerender(["gateway", "runner"]) == ["gateway"]
    assert "1.430 ms" in report.read_text() and "bench:runner" not in report.read_text()
    assert stale_sections(report) == []
    (store / "gateway.json").write_text(json.dumps(_gateway_sitting("0" * 16)))
    rerender(["gateway"])
    assert stale_sections(report) == ["gateway"]


def test_every_benchmark_renders_from_what_it_stored() -> None:
    """Each module names its stored sitting and renders with no arguments (the GPU check
    renders from its own store, written on a GPU machine)."""
    for name in _BENCHES:
        module = importlib.import_module(f"tests.benchmarks.bench_{name}")
        if name == "gpu":
            continue
        assert callable(getattr(module, "render", None)), name
        assert not inspect.signature(module.render).parameters, name
        assert name in OWN_STORES or getattr(module, "NAME", name) == name, name


def test_an_unknown_benchmark_name_is_refused_with_the_known_ones(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tests.benchmarks.__main__ import main

    assert main(["no_such_bench"]) == 2
    err = capsys.readouterr().err
    assert "unknown benchmark no_such_bench" in err and "trainer_real" in err
