"""Serving a new LoRA adapter merged into bf16 weights: ``engines/_hf_merge.py`` against peft.

The HF engine decodes with each step's adapter merged into the base weights. peft's way is
``unmerge_adapter()``, load the new LoRA weights, ``merge_adapter()``: in place, so the engine
needs weights of its own (merging into weights shared with the trainer would train the next step
on ``W0 + delta``), and each unmerge subtracts in bf16 what was added in bf16, so the base drifts
by rounding over a run. Ours keeps the originals untouched and writes ``round(W0 + delta)`` into
a buffer of each adapted layer's own (``MergedLoRA``).

On the embedded SmolLM2-135M-Instruct (bf16, the trainer's CPU dtype; LoRA r=8 on all linear
layers of the decoder, as the trainer's default targets) it measures, over ``SWAPS`` adapters
(random factors of a trained adapter's size) and ``ROUNDS`` interleaved rounds: time per swap,
the base weights' drift after the run (peft: unmerged; ours: the originals), and the served
weights' error against the exact ``round_bf16(W0 + delta)``.

Run: ``python -m tests.benchmarks merge``; each run's figures go to
``docs/benchmarks/merge.json`` as it ends, and the section is rendered from that file
(``python -m tests.benchmarks.bench_merge render`` redoes it, marked **stale** when the merge
code changed since).
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

from tests.benchmarks._report import write_section
from tests.benchmarks._stored import Sitting, stale_note

SWAPS = 20
ROUNDS = 3
RANK = 8
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
TITLE = "LoRA merge for serving: ours against peft's merge_adapter (bf16, real model)"
CODE = ("trainer/osmosis_trainer/engines/_hf_merge.py", "tests/benchmarks/bench_merge.py")
"""What the section measures (its fingerprint)."""
_LABELS = {
    "ours": "ours (`MergedLoRA`: peft's `get_delta_weight`, originals kept)",
    "peft": "peft (`unmerge_adapter` / `merge_adapter`, in place)",
}


def _base() -> Any:
    import torch

    from osmosis_trainer.models import load_model

    model: Any = load_model("embedded", dtype="bfloat16").model
    model.requires_grad_(False)
    return model.to(torch.bfloat16)


def _adapters(model: Any, n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` peft-style state dicts (``base_model.model.<module>.lora_A/B.weight``) whose updates
    are the size of a trained adapter's (B's entries ~1e-3, as after some hundred lr-1e-4 steps)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    layers = [
        (name, m)
        for name, m in model.named_modules()
        if isinstance(m, torch.nn.Linear) and name.split(".")[-1] in TARGETS
    ]
    out = []
    for _ in range(n):
        state = {}
        for name, m in layers:
            a = torch.randn(RANK, m.in_features, generator=g) / m.in_features**0.5
            b = torch.randn(m.out_features, RANK, generator=g) * 1e-3
            state[f"base_model.model.{name}.lora_A.weight"] = a
            state[f"base_model.model.{name}.lora_B.weight"] = b
        out.append(state)
    return out


def _exact(originals: dict[str, Any], state: dict[str, Any], scale: float) -> dict[str, Any]:
    """``round_bf16(W0 + scale * B @ A)`` per adapted weight, computed in fp32."""
    import torch

    out = {}
    for name, w0 in originals.items():
        module = name.removesuffix(".weight")
        a = state[f"base_model.model.{module}.lora_A.weight"].float()
        b = state[f"base_model.model.{module}.lora_B.weight"].float()
        out[name] = torch.addmm(w0.float(), b * scale, a).to(w0.dtype)
    return out


def _ulps(x: Any, ref: Any) -> tuple[float, float]:
    """Share of entries that differ, and the largest difference in bf16 ulps (the spacing of
    bf16 numbers at the larger of the two values: 8 significant bits)."""
    import torch

    x, ref = x.float(), ref.float()
    diff = (x - ref).abs()
    big = torch.maximum(x.abs(), ref.abs()).clamp_min(torch.finfo(torch.bfloat16).tiny)
    ulp = torch.exp2(torch.floor(torch.log2(big)) - 7)
    return float((diff > 0).float().mean()), float((diff / ulp).max())


def run_ours(adapters: list[dict[str, Any]]) -> dict[str, float]:
    from osmosis_trainer.engines._hf_adapter import AdapterState
    from osmosis_trainer.engines._hf_merge import MergedLoRA

    model = _base()
    params = dict(model.named_parameters())
    config = {"peft_type": "LORA", "r": RANK, "lora_alpha": 2 * RANK}
    originals = {
        k.removeprefix("base_model.model.").replace(".lora_A.weight", ".weight"): None
        for k in adapters[0]
        if ".lora_A." in k
    }
    originals = {k: params[k].detach().clone() for k in originals}
    merged = MergedLoRA()
    times = []
    for state in adapters:
        t0 = time.perf_counter()
        merged.apply(model, AdapterState("mem", config, state))
        times.append(time.perf_counter() - t0)
    served = dict(model.named_parameters())
    exact = _exact(originals, adapters[-1], 2.0)
    err = max(_ulps(served[k], exact[k])[1] for k in exact)
    share = statistics.fmean(_ulps(served[k], exact[k])[0] for k in exact)
    merged.restore(model)
    after = dict(model.named_parameters())
    drift = max(_ulps(after[k], originals[k])[1] for k in originals)
    drift_share = statistics.fmean(_ulps(after[k], originals[k])[0] for k in originals)
    return {
        "swap_s": statistics.median(times),
        "served_err_ulp": err,
        "served_diff_share": share,
        "drift_ulp": drift,
        "drift_share": drift_share,
    }


def run_peft(adapters: list[dict[str, Any]]) -> dict[str, float]:
    from peft import LoraConfig, get_peft_model, set_peft_model_state_dict

    model = _base()
    params = dict(model.named_parameters())
    names = [
        k.removeprefix("base_model.model.").replace(".lora_A.weight", ".weight")
        for k in adapters[0]
        if ".lora_A." in k
    ]
    originals = {k: params[k].detach().clone() for k in names}
    peft_model: Any = get_peft_model(
        model, LoraConfig(r=RANK, lora_alpha=2 * RANK, target_modules=TARGETS, lora_dropout=0.0)
    )
    times = []
    for i, state in enumerate(adapters):
        t0 = time.perf_counter()
        if i:
            peft_model.unmerge_adapter()
        set_peft_model_state_dict(peft_model, {k: v.to("cpu") for k, v in state.items()})
        peft_model.merge_adapter()
        times.append(time.perf_counter() - t0)
    base = peft_model.base_model.model
    served = {n: p for n, p in base.named_parameters() if n.endswith(".base_layer.weight")}
    served = {k.replace(".base_layer.weight", ".weight"): v for k, v in served.items()}
    exact = _exact(originals, adapters[-1], 2.0)
    err = max(_ulps(served[k], exact[k])[1] for k in exact)
    share = statistics.fmean(_ulps(served[k], exact[k])[0] for k in exact)
    peft_model.unmerge_adapter()
    after = {
        n.replace(".base_layer.weight", ".weight"): p
        for n, p in base.named_parameters()
        if n.endswith(".base_layer.weight")
    }
    drift = max(_ulps(after[k], originals[k])[1] for k in originals)
    drift_share = statistics.fmean(_ulps(after[k], originals[k])[0] for k in originals)
    return {
        "swap_s": statistics.median(times),
        "served_err_ulp": err,
        "served_diff_share": share,
        "drift_ulp": drift,
        "drift_share": drift_share,
    }


def main() -> None:
    import torch

    torch.manual_seed(0)
    sitting = Sitting.start("merge", "python -m tests.benchmarks merge", CODE, rounds=ROUNDS)
    for r in range(ROUNDS):
        adapters = _adapters(_base(), SWAPS, seed=r)
        for name, fn in (("ours", run_ours), ("peft", run_peft)):
            result = fn(adapters)
            sitting.record({"row": name, "round": r, "result": result})
            print(name, r, result, flush=True)
    render()


def render() -> None:
    """Rewrite the section from ``docs/benchmarks/merge.json``."""
    if not Sitting.exists("merge"):
        write_section(
            "merge",
            TITLE,
            "No stored results for this section: nothing in it has been measured on the code "
            "it describes. Run the command above (it stores `docs/benchmarks/merge.json`).",
            "python -m tests.benchmarks merge",
            machine_text="-",
            date="-",
        )
        return
    sitting = Sitting.load("merge")
    rows: dict[str, list[dict[str, float]]] = {"ours": [], "peft": []}
    for run in sitting.runs:
        rows[run["row"]].append(run["result"])
    med = {n: {k: statistics.median(x[k] for x in v) for k in v[0]} for n, v in rows.items() if v}
    ratio = [p["swap_s"] / o["swap_s"] for o, p in zip(rows["ours"], rows["peft"], strict=False)]
    table = "\n".join(
        f"| {_LABELS[n]} | {med[n]['swap_s'] * 1e3:.0f} ms | {med[n]['served_diff_share']:.2%} "
        f"| {med[n]['served_err_ulp']:.1f} | {med[n]['drift_share']:.2%} "
        f"| {med[n]['drift_ulp']:.1f} |"
        for n in med
    )
    verdicts = [
        f"- {_LABELS[n]}: "
        + (
            "serves the exact merge"
            if med[n]["served_err_ulp"] == 0
            else f"serves {med[n]['served_diff_share']:.2%} of the weights off the exact merge"
        )
        + (
            " and never changes the base weights"
            if med[n]["drift_ulp"] == 0
            else f"; {med[n]['drift_share']:.2%} of the base weights changed"
        )
        + "."
        for n in med
    ]
    data = sitting.data
    body = (
        stale_note(sitting)
        + f"Code: {data['commit']} (fingerprint {data['fingerprint']}); raw runs: "
        "`docs/benchmarks/merge.json`.\n\n"
        f"Serving {SWAPS} successive adapters merged into the embedded SmolLM2-135M's bf16 "
        f"weights (LoRA r={RANK} on all decoder linear layers, random factors of a trained "
        f"adapter's size), {len(ratio)} interleaved round(s), medians. Served error: the merged "
        "weights of the last adapter against the exact `round_bf16(W0 + delta)`; base drift: "
        "the base weights after the run against the ones loaded.\n\n"
        "| merge | time per swap | served weights off the exact merge | largest error (bf16 ulps) "
        "| base weights changed | largest drift (ulps) |\n|---|---|---|---|---|---|\n"
        + table
        + "\n\n"
        + "\n".join(verdicts)
        + "\n"
        f"- peft / ours time per swap, paired by round: {', '.join(f'{x:.2f}x' for x in ratio)}.\n"
    )
    print(body, flush=True)
    write_section(
        "merge",
        TITLE,
        body,
        data["command"],
        machine_text=f"{data['machine']}; load average {data['load_at_start']} at the start, "
        f"{data.get('load_at_end', '-')} at the end",
        date=f"{data['started']} to {data.get('ended', data['started'])}",
    )


if __name__ == "__main__":
    if sys.argv[1:] == ["render"]:
        render()
    else:
        main()
