"""Remote rollout server under load: 1000 rollouts admitted at once, with and without faults.

The server runs as ``osmosis serve`` in its own process; this process plays the training
cluster (fake LLM + completion callbacks, 10% of each failing with HTTP 500 or hanging past the
client timeout) and admits every rollout at once over loopback. Reported: admission latency
(init → 202) p50/p99, completed rollouts per second, and the correctness checks (every rollout
ends COMPLETED or ERROR with a reason, none lost, none run twice).

Run: ``python -m tests.benchmarks remote``
"""

from __future__ import annotations

import asyncio
import logging
import os

from tests.benchmarks._report import write_section
from tests.core.remote._load import LoadReport, run_load, sequential_admission

N = 1000


def _row(label: str, r: LoadReport) -> str:
    s = r.summary()
    faults = s["faults_injected"]
    rate = "-" if "held" in label else f"{s['rollouts_per_s']:.1f}"
    return (
        f"| {label} | {s['rollouts']} | {s['admitted']} | {s['admission_p50_ms']:.0f} | "
        f"{s['admission_p99_ms']:.0f} | {rate} | {s['completed']} | {s['errored']} | "
        f"{faults['llm_500']}/{faults['llm_hang']} | {faults['callback_500']}/{faults['callback_hang']} | "
        f"{s['duplicate_callbacks']} | {s['recovered_from_status_route']} | "
        f"{'none' if not s['problems'] else '; '.join(s['problems'])} |"
    )


def main() -> None:
    logging.getLogger("osmosis").setLevel(logging.ERROR)
    runs = [
        ("admission only (loops held 20 s)",
         asyncio.run(run_load(N, fault_rate=0.0, subprocess=True, deadline_s=600, hold_s=20.0))),
        ("no faults", asyncio.run(run_load(N, fault_rate=0.0, subprocess=True, deadline_s=600))),
        ("10% faults", asyncio.run(run_load(N, fault_rate=0.1, subprocess=True, deadline_s=600))),
    ]
    for label, report in runs:
        print(label, report.summary(), flush=True)
    seq = sorted(asyncio.run(sequential_admission(200)))
    seq_p50, seq_p99 = seq[len(seq) // 2], seq[min(len(seq) - 1, round(0.99 * (len(seq) - 1)))]
    print("sequential admission", seq_p50, seq_p99, flush=True)
    load = os.getloadavg()[0]
    body = "\n".join([
        f"{N} rollouts posted to `/v1/rollout/init` at once (one `asyncio.gather`) against "
        "`osmosis serve` (a separate process, `max_concurrent_rollouts=200`); each rollout is "
        "two LLM calls and one tool call, every 20th raises in the agent loop on purpose. Faults: "
        "the fake cluster answers 500 or hangs (3x the 0.3 s client timeout) on that share of LLM "
        "calls and completion callbacks; the server retries both (3 LLM retries, 2 callback "
        "retries). Rollouts/s = rollouts / time from the first init until the server has none "
        "pending. Everything shares the machine's cores (the fake cluster and the driver run in "
        f"one process); 1-minute load average at the end: {load:.1f}.",
        "",
        "| run | rollouts | admitted (202) | admission p50 ms | admission p99 ms | rollouts/s | "
        "COMPLETED | ERROR | LLM faults 500/hang | callback faults 500/hang | duplicate callbacks | "
        "results read from status route | problems |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        *(_row(label, report) for label, report in runs),
        "",
        f"One init at a time (200 in a row, each on a fresh connection, rollouts running "
        f"meanwhile): admission p50 {seq_p50:.1f} ms, p99 {seq_p99:.1f} ms. In a burst, the "
        "server answers every init it holds in turn, so a 1000-init burst's p50 is about "
        "1000 x the per-init cost.",
        "",
        "The first row times admission alone: every loop sleeps 20 s before its first LLM "
        "call, so the 1000 inits compete only with each other (its rollouts/s is not "
        "meaningful). In the other rows the rollouts admitted first are already calling the "
        "LLM while later inits wait, on the same cores as the driver and the fake cluster.",
        "",
        "ERROR rows: the 50 rollouts whose loop raises on purpose, plus any whose LLM call "
        "failed all 4 attempts. Duplicate callbacks are retries of callbacks the cluster had "
        "processed but answered too late (delivery is at least once; the result is identical). "
        "Problems lists lost rollouts, rollouts run twice or errors without a reason.",
    ])
    write_section("remote", "Remote rollout server: admission and throughput under faults", body,
                  "python -m tests.benchmarks remote")


if __name__ == "__main__":
    main()
