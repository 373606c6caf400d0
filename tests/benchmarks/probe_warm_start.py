"""How often the warm start alone solves the RL rows, per warm-start setting and seed: the
measurement behind ``docs/learning_warm_start_probe.json`` (the ``learning`` section's table
"The warm start's own carrying, before RL") and the quick start's one-epoch warm start.

RL can only reinforce what the policy samples: a warm-started agent that never carries a tool
result into its next call leaves RL nothing to reward. For each setting and seed this runs the
quick start's training with ``max_steps = 0`` (the warm start alone, its checkpoint saved as
``RUN:warm``), then evaluates that checkpoint on RL rows 0-15 with 4 samples each at the RL
sampling temperature (1.0)::

    python -m tests.benchmarks.probe_warm_start LABEL SEED [section.key=VALUE ...]

e.g. ``... probe_warm_start e1 0 warm_start.epochs=1``. The row (pass@1 = exact final answers,
pass@4, tool-call rate, calls per rollout) is appended to the file's ``runs`` under ``LABEL``.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.benchmarks._report import ROOT
from tests.benchmarks.bench_learning import _osmosis, scaffold, set_toml

OUT = ROOT / "docs" / "learning_warm_start_probe.json"
ROWS = "0-15"
SAMPLES = 4


def probe(label: str, seed: int, overrides: dict[str, str]) -> dict[str, Any]:
    """Warm start alone with ``overrides``, then its checkpoint on the RL rows."""
    ws = scaffold(Path(tempfile.mkdtemp(prefix=f"warm-{label}-{seed}-")))
    config = ws / "configs" / "training" / "calc.toml"
    for key, value in {"training.seed": str(seed), "training.max_steps": "0", **overrides}.items():
        set_toml(config, key, value)
    set_toml(ws / "configs" / "eval" / "calc.toml", "sampling.rollout_temperature", "1.0")
    done = _osmosis(["train", "submit", "configs/training/calc.toml", "--json"], ws)
    run = Path(json.loads(done.stdout)["run"])
    evaluated = _osmosis(
        ["eval", "run", "configs/eval/calc.toml", "--model", f"{run.name}:warm", "--rows", ROWS,
         "--n", str(SAMPLES), "--json"],
        ws,
    )
    summary = json.loads(evaluated.stdout)["summary"]
    return {
        "label": label,
        "seed": seed,
        "overrides": overrides,
        "pass1": summary.get("pass_rate"),
        "pass4": (summary.get("pass_at_k") or {}).get(f"pass@{SAMPLES}"),
        "tool_call_rate": summary.get("tool_call_rate"),
        "calls": summary.get("tool_calls_per_rollout"),
        "run": str(run),
        "note": "probe_warm_start.py",
    }


def main(argv: list[str]) -> None:
    if len(argv) < 2:
        raise SystemExit(__doc__)
    label, seed = argv[0], int(argv[1])
    overrides = dict(arg.split("=", 1) for arg in argv[2:])
    row = probe(label, seed, overrides)
    doc = json.loads(OUT.read_text()) if OUT.exists() else {"runs": []}
    doc["runs"].append(row)
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
