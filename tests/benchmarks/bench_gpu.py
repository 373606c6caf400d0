"""The prepared GPU check: ``python -m tests.benchmarks gpu`` on a machine with one CUDA GPU.

What it does, in one process tree that fits 15 minutes on one H100 with start-up:

1. Runs the ``gpu``-marked tests (``tests/trainer/gpu``: the HF engine on CUDA, engine vs
   trainer logprobs in bf16, GRPO steps with LoRA, checkpoint + resume) and records the tally.
2. Builds randomly initialised Qwen3-shaped models (``qwen3-0.6b``, ``qwen3-1.7b``: Qwen3's
   hidden sizes, 28 layers, grouped-query attention, its 151,936-entry vocabulary and tied
   embeddings) from a config; no weights are downloaded. The tokenizer is the tiny offline one
   of the CPU tests: ids past it decode to nothing, which costs the samplers nothing and keeps
   the logits as wide as the real model's.
3. Times our GRPO step against TRL's ``GRPOTrainer`` on the same GPU, same LoRA, loss and
   reward as the CPU benchmark (:mod:`tests.benchmarks.bench_trainer`): TRL's defaults
   (``bf16=True`` autocast + ``gradient_checkpointing=True``) and TRL without checkpointing
   (its fastest setting on the CPU), and ours with 1024-token micro-batches (what a smaller
   update pass saves in memory and costs in time). Rows run interleaved, a fresh process each, in rounds
   until ``OSMOSIS_GPU_BUDGET_S`` (default 330 s) is spent; each row's peak GPU memory is
   ``torch.cuda.max_memory_allocated``.

The raw results go to ``docs/gpu_runs.json`` (``OSMOSIS_GPU_RESULTS`` elsewhere) and the
``gpu`` section of BENCHMARKS.md is rendered from that file, so on a machine without a GPU this
command only re-renders the stored results. ``tests/benchmarks/gpu_device.sh`` is the whole
device run (offline wheels, then this module) for a machine with no network.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tests.benchmarks._report import ROOT, cpu_info, write_readme_block, write_section
from tests.benchmarks.bench_trainer import GROUP, PROMPTS, Case, Setup, run_ours, run_trl

RESULTS = Path(os.environ.get("OSMOSIS_GPU_RESULTS", ROOT / "docs" / "gpu_runs.json"))
COMMAND = "bash tests/benchmarks/gpu_device.sh (python -m tests.benchmarks gpu, offline wheels)"
SHAPES: dict[str, dict[str, int]] = {
    # Qwen3-0.6B / Qwen3-1.7B's published shapes (head_dim 128, 8 KV heads, tied embeddings).
    "qwen3-0.6b": {
        "hidden": 1024,
        "layers": 28,
        "heads": 16,
        "kv": 8,
        "inter": 3072,
        "head_dim": 128,
        "vocab": 151936,
        "new_tokens": 128,
    },
    "qwen3-1.7b": {
        "hidden": 2048,
        "layers": 28,
        "heads": 16,
        "kv": 8,
        "inter": 6144,
        "head_dim": 128,
        "vocab": 151936,
        "new_tokens": 128,
    },
    # Dry runs of this script on a CPU (OSMOSIS_GPU_DRY_RUN=cpu OSMOSIS_GPU_SHAPES=qwen3-tiny).
    "qwen3-tiny": {
        "hidden": 64,
        "layers": 2,
        "heads": 4,
        "kv": 2,
        "inter": 128,
        "head_dim": 16,
        "vocab": 512,
        "new_tokens": 16,
    },
}
SETUPS = [
    Setup("osmosis (defaults)"),
    # On CUDA the default micro-batch (8192 tokens) takes a whole 32-sample step in one pass,
    # so the activations kept for backward set the peak: this row prices a smaller budget.
    Setup("osmosis, 1024-token micro-batches", micro_batch_tokens=1024),
    Setup(
        "TRL defaults (bf16 autocast + gradient checkpointing)",
        who="trl",
        dtype="bfloat16",
        gradient_checkpointing=True,
    ),
    Setup("TRL bf16 autocast, no checkpointing", who="trl", dtype="bfloat16"),
]


def build_qwen3(folder: Path, shape: str) -> Path:
    """A random-init Qwen3-shaped causal LM in bf16 with the offline test tokenizer."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from osmosis_trainer.models import build_tiny_model

    if (folder / "osmosis_qwen3.json").exists():
        return folder
    build_tiny_model(folder)  # the tokenizer (and a tiny model, replaced below)
    for old in folder.glob("*.safetensors"):
        old.unlink()
    s = SHAPES[shape]
    tiny = json.loads((folder / "config.json").read_text())
    config = Qwen3Config(
        vocab_size=s["vocab"],
        hidden_size=s["hidden"],
        intermediate_size=s["inter"],
        num_hidden_layers=s["layers"],
        num_attention_heads=s["heads"],
        num_key_value_heads=s["kv"],
        head_dim=s["head_dim"],
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        eos_token_id=tiny["eos_token_id"],
        pad_token_id=tiny["pad_token_id"],
        bos_token_id=None,
    )
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = Qwen3ForCausalLM(config).to(torch.bfloat16)
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    model.save_pretrained(folder)
    params = sum(p.numel() for p in model.parameters())
    (folder / "osmosis_qwen3.json").write_text(json.dumps({"shape": shape, "params": params}))
    return folder


def _worker(spec: str) -> None:
    """One timed run in this fresh process; prints its result (with peak GPU memory) last."""
    import torch

    job = json.loads(spec)
    case, setup, root = Case(**job["case"]), Setup(**job["setup"]), Path(job["root"])
    run = run_trl if setup.who == "trl" else run_ours
    result = asdict(run(case, job["model"], root, setup))
    cuda = case.device.startswith("cuda")
    result["peak_gpu_gb"] = torch.cuda.max_memory_allocated() / 1e9 if cuda else 0.0
    print("RESULT " + json.dumps(result), flush=True)


def _one(case: Case, setup: Setup, model: str, root: Path) -> dict[str, Any]:
    spec = json.dumps(
        {"case": asdict(case), "setup": asdict(setup), "root": str(root), "model": model}
    )
    proc = subprocess.run(
        [sys.executable, "-m", "tests.benchmarks.bench_gpu", "--worker", spec],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        return {"error": f"exit {proc.returncode}: {proc.stderr[-1500:]}"}
    result: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    return result


def _gpu_tests() -> dict[str, Any]:
    """The ``gpu``-marked tests; their last line (the pytest tally) and exit status."""
    started = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-m",
            "gpu",
            "tests/trainer/gpu",
            "-q",
            "-p",
            "no:cacheprovider",
            "-W",
            "ignore::UserWarning",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=420,
        cwd=ROOT,
    )
    print(proc.stdout[-4000:], proc.stderr[-2000:], flush=True)
    tally = [ln for ln in proc.stdout.splitlines() if ln.strip()][-1:] or ["no output"]
    return {
        "exit": proc.returncode,
        "tally": tally[0].strip("= "),
        "seconds": round(time.perf_counter() - started, 1),
    }


def measure(device: str = "cuda") -> dict[str, Any]:
    """Tests and timed rows on ``device`` (``cpu`` dry-runs the whole check on a small shape
    set through ``OSMOSIS_GPU_SHAPES``; its figures mean nothing)."""
    import torch

    budget = float(os.environ.get("OSMOSIS_GPU_BUDGET_S", "330"))
    shapes = os.environ.get("OSMOSIS_GPU_SHAPES", "qwen3-0.6b,qwen3-1.7b").split(",")
    out: dict[str, Any] = {
        "device": torch.cuda.get_device_name(0) if device == "cuda" else device,
        "host": cpu_info(),
        "software": _software(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "models": {},
    }
    # OSMOSIS_GPU_ONLY=ours with OSMOSIS_GPU_PREVIOUS=FILE: time only our rows, keeping the
    # other rows' runs from FILE (an earlier session on the same kind of GPU, named below).
    # OSMOSIS_GPU_APPEND=1 with it: a further round on the same machine kind, added to FILE's
    # rows (a device call cut short by the session's GPU time resumes this way).
    only = os.environ.get("OSMOSIS_GPU_ONLY")
    setups = [s for s in SETUPS if only is None or s.who == only]
    previous_file = os.environ.get("OSMOSIS_GPU_PREVIOUS")
    previous: dict[str, Any] = json.loads(Path(previous_file).read_text()) if previous_file else {}
    append = bool(previous) and os.environ.get("OSMOSIS_GPU_APPEND") == "1"
    if append and previous["device"] != out["device"]:
        raise SystemExit(f"OSMOSIS_GPU_APPEND: {previous_file} was timed on {previous['device']}, "
                         f"this is {out['device']}; rows from two kinds of GPU do not pool")
    out["tests"] = previous["tests"] if append else _gpu_tests()
    kept_rows = [s.label for s in SETUPS if s not in setups]
    if previous and kept_rows:
        out["earlier"] = {"date": previous["date"], "device": previous["device"],
                          "rows": kept_rows}
    root = Path(tempfile.mkdtemp(prefix="osmosis-gpu-"))
    started = time.perf_counter()
    for shape in shapes:
        folder = build_qwen3(root / shape, shape)
        meta = json.loads((folder / "osmosis_qwen3.json").read_text())
        case = Case(
            name=shape, new_tokens=SHAPES[shape]["new_tokens"], device=device, measured=3, warmup=1
        )
        kept = previous.get("models", {}).get(shape, {}).get("rows", {})
        rows: dict[str, list[dict[str, Any]]] = {
            s.label: list(kept.get(s.label, [])) if append or s not in setups else []
            for s in SETUPS
        }
        out["models"][shape] = {"params": meta["params"], "case": _describe(case), "rows": rows}
        # Rounds of every row (interleaved): the first round always, more while the budget
        # (shared by the shapes, the later ones keeping a round each) allows.
        share = budget * (shapes.index(shape) + 1) / len(shapes)
        while True:
            t0 = time.perf_counter()
            for setup in setups:
                rows[setup.label].append(_one(case, setup, str(folder), root))
                print(f"  {shape} | {setup.label}: {rows[setup.label][-1]}", flush=True)
                _store(out)  # what a cut-short device session leaves is still a result
            took = time.perf_counter() - t0
            if time.perf_counter() - started + took > share or len(rows[setups[0].label]) >= 3:
                break
    # A shape not timed this time (OSMOSIS_GPU_SHAPES narrowed to buy rounds for a verdict)
    # keeps the earlier session's rows, marked with where and when they were timed.
    for shape, model in previous.get("models", {}).items():
        if shape not in out["models"]:
            out["models"][shape] = {
                **model, "timed": model.get("timed", f"{previous['date']} on {previous['device']}")
            }
    return out


def _describe(case: Case) -> str:
    return (
        f"{PROMPTS} prompts x {GROUP} samples x {case.new_tokens} new tokens (random weights rarely end "
        f"early); {case.device}; {case.warmup} warm-up + {case.measured} timed steps per run"
    )


def _store(data: dict[str, Any]) -> None:
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(data, indent=1) + "\n")


def _software() -> str:
    import importlib.metadata as md

    parts = [f"Python {sys.version.split()[0]}"]
    for dist in ("torch", "transformers", "peft", "trl"):
        try:
            parts.append(f"{dist} {md.version(dist)}")
        except md.PackageNotFoundError:
            parts.append(f"{dist} missing")
    return ", ".join(parts)


def _median(runs: list[dict[str, Any]], key: str) -> float:
    values = [r[key] for r in runs if key in r and r[key] is not None]
    return statistics.median(values) if values else float("nan")


def _ratios(
    rows: dict[str, list[dict[str, Any]]],
) -> tuple[str | None, dict[str, tuple[float | None, float | None]]]:
    """TRL's fastest row, and each row's step time over that row's and peak memory over TRL's
    defaults' (None where a side has no finished run)."""
    trl = {label: runs for label, runs in rows.items() if label.startswith("TRL")}
    ok = {label: runs for label, runs in trl.items() if _median(runs, "step_s") > 0}
    fastest = min(ok, key=lambda k: _median(ok[k], "step_s")) if ok else None
    default = next((k for k in trl if "defaults" in k), None)
    ref_mem = _median(rows[default], "peak_gpu_gb") if default is not None else 0.0
    ratios: dict[str, tuple[float | None, float | None]] = {}
    for label, runs in rows.items():
        good = [r for r in runs if "error" not in r]
        step, mem = _median(good, "step_s"), _median(good, "peak_gpu_gb")
        to_fast = step / _median(ok[fastest], "step_s") if fastest and good else None
        ratios[label] = (to_fast, mem / ref_mem if good and ref_mem > 0 else None)
    return fastest, ratios


def readme_block(data: dict[str, Any]) -> str:
    """What README.md quotes of the last GPU run: where, the tests, and per model our step
    against TRL's fastest and our memory against TRL's defaults, with its runs per row."""
    parts = []
    for shape, model in data["models"].items():
        fastest, ratios = _ratios(model["rows"])
        ours = next((k for k in model["rows"] if not k.startswith("TRL")), "")
        to_fast, to_mem = ratios.get(ours, (None, None))
        if fastest is None or to_fast is None or to_mem is None:
            parts.append(f"{shape}: no comparison (a row has no finished run)")
            continue
        fewest = min((len(r) for r in model["rows"].values()), default=0)
        where = f", timed {model['timed']}" if "timed" in model else ""
        parts.append(
            f"{shape}: our step {to_fast:.2f}x TRL's fastest ({fastest}), "
            f"our peak GPU memory {to_mem:.2f}x TRL's defaults "
            f"({fewest} run(s) per row{'' if fewest >= 3 else ': indicative'}{where})"
        )
    return (
        f"{data['device']}, {data['date']}: `gpu` tests {data['tests']['tally']}; "
        + "; ".join(parts)
        + " (`BENCHMARKS.md`, `gpu`)."
    )


def render(data: dict[str, Any]) -> str:
    """The section body from stored results (no figure is typed by hand)."""
    tests = data["tests"]
    lines = [
        f"- Measured {data['date']} on {data['device']}",
        f"- `gpu` tests (`pytest -m gpu tests/trainer/gpu`): {tests['tally']} "
        f"(exit {tests['exit']}, {tests['seconds']} s)",
        *(
            [f"- Rows timed in an earlier session ({data['earlier']['date']}, "
             f"{data['earlier']['device']}): {', '.join(data['earlier']['rows'])}"]
            if "earlier" in data
            else []
        ),
        "",
    ]
    for shape, model in data["models"].items():
        rows = model["rows"]
        fastest, ratios = _ratios(rows)
        lines += [
            f"**{shape}** (random init, {model['params'] / 1e9:.2f} B parameters; {model['case']})"
            + (f": timed in an earlier session, {model['timed']}" if "timed" in model else ""),
            "",
            "| trainer | runs | step time | tokens/s | peak GPU memory | step vs TRL fastest "
            "| memory vs TRL defaults |",
            "|---|---|---|---|---|---|---|",
        ]
        for label, runs in rows.items():
            good = [r for r in runs if "error" not in r]
            if not good:
                err = runs[0].get("error", "no run") if runs else "no run"
                lines.append(f"| {label} | 0 | failed: {err.splitlines()[-1][:120]} | | | | |")
                continue
            step, mem = _median(good, "step_s"), _median(good, "peak_gpu_gb")
            tokens = _median(good, "tokens_per_step")
            to_fast, to_mem = ratios[label]
            vs_fast = "-" if to_fast is None else f"{to_fast:.2f}x"
            vs_mem = "-" if to_mem is None else f"{to_mem:.2f}x"
            lines.append(
                f"| {label} | {len(good)} | {step:.2f} s | {tokens / step:.0f} | {mem:.1f} GB "
                f"| {vs_fast} | {vs_mem} |"
            )
        if fastest is not None:
            lines += ["", f"TRL's fastest setting here: {fastest}."]
        fewest = min((len(r) for r in rows.values()), default=0)
        if fewest < 3:
            lines.append(
                f"{fewest} run(s) per row (15 minutes of GPU a session): ratios indicative, "
                "no verdict (a verdict takes >= 3 interleaved runs)."
            )
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    if "--worker" in sys.argv:
        _worker(sys.argv[sys.argv.index("--worker") + 1])
        return
    import torch

    dry = os.environ.get("OSMOSIS_GPU_DRY_RUN") == "cpu"
    if dry:
        print(render(measure("cpu")), flush=True)  # a check of this script, not a result
        return
    if torch.cuda.is_available():
        data = measure("cuda")
        _store(data)
        print(f"raw results: {RESULTS}", flush=True)
    elif RESULTS.is_file():
        print(f"no CUDA GPU here: rendering the stored results in {RESULTS}", flush=True)
        data = json.loads(RESULTS.read_text())
    else:
        print("no CUDA GPU here and no stored GPU results: nothing to measure", flush=True)
        return
    write_section(
        "gpu",
        "GPU: our GRPO step against TRL on one GPU",
        render(data),
        COMMAND,
        machine_text=f"{data['device']}; host {data['host']}; {data['software']}",
        date=data["date"],
    )
    write_readme_block("gpu-readme", readme_block(data))


if __name__ == "__main__":
    main()
