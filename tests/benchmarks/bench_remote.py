"""Remote rollout server under load: 1000 rollouts admitted at once, with and without faults.

The server runs as ``osmosis serve`` in its own process; this process plays the training
cluster (fake LLM + completion callbacks, 10% of each failing with HTTP 500 or hanging past the
client timeout) and admits every rollout at once over loopback. Reported: admission latency
(init → 202) p50/p99, completed rollouts per second, and the correctness checks (every rollout
ends COMPLETED or ERROR with a reason, none lost, none run twice).

Run: ``python -m tests.benchmarks remote``; each run goes to ``docs/benchmarks/remote.json`` as
it ends and the section is rendered from that file
(``python -m tests.benchmarks.bench_remote render``).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import sys
from typing import Any

from tests.benchmarks._stored import Sitting
from tests.core.remote._load import run_load, sequential_admission

NAME = "remote"
TITLE = "Remote rollout server: admission and throughput under faults"
COMMAND = "python -m tests.benchmarks remote"
CODE = (
    "core/osmosis_ai/remote",
    "core/osmosis_ai/rollout",
    "tests/core/remote/_load.py",  # the load harness: its retries and faults shape the figures
    "tests/benchmarks/bench_remote.py",
)
"""What the section measures (its fingerprint)."""
N = 1000
DEADLINE_S = 600
BURSTS = ((0.0, 20.0), (0.0, 0.0), (0.1, 0.0))
"""(fault rate, seconds every loop waits before its first LLM call) of each burst, in order."""
SEQUENTIAL = 200


def _harness() -> dict[str, Any]:
    """The load harness's defaults the section describes, stored so the prose quotes them from
    the sitting rather than a hand."""
    params = inspect.signature(run_load).parameters
    return {k: params[k].default for k in ("max_concurrent", "client_timeout_s", "explode_every")}


def main() -> None:
    logging.getLogger("osmosis").setLevel(logging.ERROR)
    sitting = Sitting.start(NAME, COMMAND, CODE, rollouts=N, deadline_s=DEADLINE_S,
                            sequential=SEQUENTIAL, **_harness())
    for fault_rate, hold_s in BURSTS:
        report = asyncio.run(run_load(N, fault_rate=fault_rate, subprocess=True,
                                      deadline_s=DEADLINE_S, hold_s=hold_s))
        summary = report.summary()
        print(_label(fault_rate, hold_s), summary, flush=True)
        sitting.record({"kind": "burst", "fault_rate": fault_rate, "hold_s": hold_s,
                        "summary": summary})
    seq = asyncio.run(sequential_admission(SEQUENTIAL))
    print("sequential admission", sorted(seq)[len(seq) // 2], flush=True)
    sitting.record({"kind": "sequential", "admission_ms": seq})
    render()


def _label(fault_rate: float, hold_s: float) -> str:
    if hold_s:
        return f"admission only (loops held {hold_s:g} s)"
    return f"{fault_rate:.0%} faults" if fault_rate else "no faults"


def _row(run: dict[str, Any]) -> str:
    s = run["summary"]
    faults = s["faults_injected"]
    # a held burst's wall is mostly the hold: its rate says nothing
    rate = "-" if run["hold_s"] else f"{s['rollouts_per_s']:.1f}"
    return (
        f"| {_label(run['fault_rate'], run['hold_s'])} | {s['rollouts']} | {s['admitted']} | "
        f"{s['admission_p50_ms']:.0f} | {s['admission_p99_ms']:.0f} | {rate} | {s['completed']} | "
        f"{s['errored']} | {faults['llm_500']}/{faults['llm_hang']} | "
        f"{faults['callback_500']}/{faults['callback_hang']} | {s['duplicate_callbacks']} | "
        f"{s['recovered_from_status_route']} | "
        f"{'none' if not s['problems'] else '; '.join(s['problems'])} |"
    )


def render() -> None:
    """Rewrite the section from ``docs/benchmarks/remote.json``."""
    sitting = Sitting.for_render(NAME, TITLE, COMMAND)
    if sitting is None:
        return
    data = sitting.data
    bursts = [r for r in sitting.runs if r["kind"] == "burst"]
    seq_run = next((r for r in sitting.runs if r["kind"] == "sequential"), None)
    timeout, every = data["client_timeout_s"], data["explode_every"]
    if seq_run is not None:
        seq = sorted(seq_run["admission_ms"])
        p50, p99 = seq[len(seq) // 2], seq[min(len(seq) - 1, round(0.99 * (len(seq) - 1)))]
        sequential = (
            f"One init at a time ({len(seq)} in a row, each on a fresh connection, rollouts "
            f"running meanwhile): admission p50 {p50:.1f} ms, p99 {p99:.1f} ms. In a burst, the "
            f"server answers every init it holds in turn, so a {data['rollouts']}-init burst's "
            f"p50 is about {data['rollouts']} x the per-init cost."
        )
    else:
        sequential = "One init at a time: not measured (the sitting ended before it)."
    held = next((r for r in bursts if r["hold_s"]), None)
    held_note = (
        f"The first row times admission alone: every loop sleeps {held['hold_s']:g} s before "
        f"its first LLM call, so the {data['rollouts']} inits compete only with each other (its "
        "rollouts/s is not meaningful). In the other rows the rollouts admitted first are "
        "already calling the LLM while later inits wait, on the same cores as the driver and "
        "the fake cluster."
        if held is not None
        else "The rollouts admitted first are already calling the LLM while later inits wait, "
        "on the same cores as the driver and the fake cluster."
    )
    body = "\n".join([
        f"{data['rollouts']} rollouts posted to `/v1/rollout/init` at once (one "
        "`asyncio.gather`) against `osmosis serve` (a separate process, "
        f"`max_concurrent_rollouts={data['max_concurrent']}`); each rollout is two LLM calls "
        f"and one tool call, one in {every} raises in the agent loop on purpose. Faults: the "
        f"fake cluster answers 500 or hangs (3x the {timeout:g} s client timeout) on that share "
        "of LLM calls and completion callbacks; the server retries both (3 LLM retries, 2 "
        "callback retries). Rollouts/s = rollouts / time from the first init until the server "
        "has none pending. Everything shares the machine's cores (the fake cluster and the "
        "driver run in one process); 1-minute load average after the last run: "
        f"{sitting.runs[-1]['load']:.1f}.",
        "",
        "| run | rollouts | admitted (202) | admission p50 ms | admission p99 ms | rollouts/s | "
        "COMPLETED | ERROR | LLM faults 500/hang | callback faults 500/hang | duplicate callbacks | "
        "results read from status route | problems |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        *(_row(r) for r in bursts),
        "",
        sequential,
        "",
        held_note,
        "",
        f"ERROR rows: the rollouts whose loop raises on purpose (one in {every}), plus any whose "
        "LLM call failed all 4 attempts. Duplicate callbacks are retries of callbacks the "
        "cluster had processed but answered too late (delivery is at least once; the result is "
        "identical). Problems lists lost rollouts, rollouts run twice or errors without a "
        "reason.",
    ])
    print(body, flush=True)
    sitting.write(TITLE, body)


if __name__ == "__main__":
    if sys.argv[1:] == ["render"]:
        render()
    else:
        main()
