"""trainer_real's path lines: a verdict of its own, or the figure only where another section
judges the path."""

from __future__ import annotations

from typing import Any

from tests.benchmarks import bench_trainer_real as real


def _row(key: str, steps: list[float]) -> Any:
    runs = [
        {"round": i, "result": {"step_s": s, "tokens_per_step": 2048.0, "peak_rss_gb": 1.0,
                                "cpu_s": s * 1.5}}
        for i, s in enumerate(steps)
    ]
    return real._Row(key, {"label": f"row {key}", "who": "ours"}, runs)


def test_a_path_is_judged_here_unless_another_section_judges_it() -> None:
    ours, without = _row("ours", [10.0, 10.0, 10.0]), _row("noshare", [10.2, 10.3, 10.1])
    own = real._path_line("a path", without, ours, False, True)
    assert own.endswith("-> gains < 10 %: remove it.")
    elsewhere = real._path_line("a path", without, ours, False, True, real.JUDGED_IN["noshare"])
    assert "remove it" not in elsewhere
    assert "-> < 10 % on this step; kept or removed by the verdict in `update`" in elsewhere
    paying = real._path_line("a path", _row("x", [12.0] * 3), ours, False, True)
    assert paying.endswith("-> pays (>= 10 % on wall and CPU).")
