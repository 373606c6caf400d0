from __future__ import annotations

from typing import Any

from tests.benchmarks import bench_gpu


def _runs(step: float, memory: float) -> list[dict[str, Any]]:
    return [{"step_s": step, "peak_gpu_gb": memory, "tokens_per_step": 4096.0}]


def _data() -> dict[str, Any]:
    return {
        "device": "a GPU",
        "date": "2026-11-27 19:07 UTC",
        "tests": {"tally": "4 passed in 30s", "exit": 0, "seconds": 31.0},
        "models": {
            "qwen3-0.6b": {
                "params": 6e8,
                "case": "8 prompts",
                "rows": {
                    # TRL's rows first: ours is found by its label, not its place
                    "TRL defaults (checkpointing)": _runs(8.0, 4.0),
                    "TRL no checkpointing": _runs(10.0, 12.0),
                    "osmosis (defaults)": _runs(4.0, 6.0),
                },
            },
            "qwen3-1.7b": {
                "params": 1.7e9,
                "case": "8 prompts",
                "rows": {
                    "osmosis (defaults)": [{"error": "CUDA out of memory"}],
                    "TRL defaults (checkpointing)": _runs(8.0, 4.0),
                },
            },
        },
    }


def test_readme_block_quotes_ratios_from_the_stored_rows() -> None:
    text = bench_gpu.readme_block(_data())
    assert text.startswith("a GPU, 2026-11-27 19:07 UTC: `gpu` tests 4 passed in 30s;")
    assert "qwen3-0.6b: our step 0.50x TRL's fastest (TRL defaults (checkpointing))" in text
    assert "our peak GPU memory 1.50x TRL's defaults" in text
    assert "qwen3-1.7b: no comparison (a row has no finished run)" in text


def test_section_table_agrees_with_the_readme_ratios() -> None:
    text = bench_gpu.render(_data())
    assert "| osmosis (defaults) | 1 | 4.00 s | 1024 | 6.0 GB | 0.50x | 1.50x |" in text
    assert "| osmosis (defaults) | 0 | failed: CUDA out of memory |" in text


def test_a_shape_kept_from_an_earlier_session_says_when_and_where_it_was_timed() -> None:
    data = _data()
    data["models"]["qwen3-0.6b"]["timed"] = "2026-11-20 10:00 UTC on an older GPU"
    section, quote = bench_gpu.render(data), bench_gpu.readme_block(data)
    assert "**qwen3-0.6b** (random init, 0.60 B parameters; 8 prompts): timed in an earlier " \
        "session, 2026-11-20 10:00 UTC on an older GPU" in section
    assert "**qwen3-1.7b** (random init, 1.70 B parameters; 8 prompts)\n" in section
    assert "memory 1.50x TRL's defaults (1 run(s) per row: indicative, timed 2026-11-20 10:00 UTC " \
        "on an older GPU)" in quote
