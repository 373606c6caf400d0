"""Runner overhead per rollout with an instant workflow, at 1, 100 and 1000 concurrent rollouts.

Run: ``python -m tests.benchmarks runner``. Target: < 1 ms of runner overhead per rollout, and
1000 concurrent rollouts held without error. Each run goes to ``docs/benchmarks/runner.json`` as
it ends and the section is rendered from that file
(``python -m tests.benchmarks.bench_runner render``).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from osmosis_ai.data import DatasetRow
from osmosis_ai.rollout import (
    AgentWorkflow,
    AgentWorkflowContext,
    Grader,
    GraderContext,
    RolloutSample,
)
from osmosis_ai.rollout.running import Entrypoint, RolloutRunner
from osmosis_ai.testing import RecordingEndpoint
from tests.benchmarks._stored import Sitting

NAME = "runner"
TITLE = "Rollout runner overhead"
COMMAND = "python -m tests.benchmarks runner"
CODE = ("core/osmosis_ai/rollout", "tests/benchmarks/bench_runner.py")
"""What the section measures (its fingerprint)."""
TARGET_MS = 1.0
ROLLOUTS = 3000
LEVELS = (1, 100, 1000)
REPEATS = 3
"""Each local row is the best of this many runs."""
HELD_S = 0.5
HELD_ROLLOUTS = 1000
WORKERS = (1, 4)
PROCESS_ROLLOUTS = 400


class Instant(AgentWorkflow[Any]):
    async def run(self, ctx: AgentWorkflowContext[Any]) -> Any:
        return [*ctx.prompt, {"role": "assistant", "content": "4"}]


class Held(AgentWorkflow[Any]):
    async def run(self, ctx: AgentWorkflowContext[Any]) -> Any:
        await asyncio.sleep(HELD_S)
        return [{"role": "assistant", "content": "4"}]


class Exact(Grader[Any]):
    async def grade(self, ctx: GraderContext[Any]) -> None:
        for sid, sample in ctx.samples.items():
            ctx.set_sample_reward(sid, float(sample.messages[-1]["content"] == ctx.label))


def rows(n: int) -> list[DatasetRow]:
    return [
        DatasetRow(i, i, [{"role": "user", "content": "2+2?"}], "4", {"i": i}, None, "2+2?")
        for i in range(n)
    ]


async def _direct(n: int) -> float:
    """The work itself with no runner: build the workflow, run it, build and grade a sample."""
    start = time.perf_counter()
    for row in rows(n):
        wf = Instant(None)
        msgs = await wf.run(AgentWorkflowContext(prompt=row.prompt, metadata={}, scope=None))
        samples = {"main": RolloutSample(id="main", messages=msgs)}
        await Exact(None).grade(GraderContext(samples=samples, label=row.label))
    return time.perf_counter() - start


async def _runner(entry: Entrypoint, n: int, concurrency: int, **kw: Any) -> tuple[float, int, int]:
    runner = RolloutRunner(entry, RecordingEndpoint(), concurrency=concurrency, **kw)
    start = time.perf_counter()
    async with runner:
        outcomes = [o async for o in runner.run(rows(n))]
    wall = time.perf_counter() - start
    ok = sum(1 for o in outcomes if o.ok and o.reward == 1.0)
    return wall, ok, runner.peak_in_flight


_WORKER_MODULE = '''
from osmosis_ai.rollout import AgentWorkflow, Grader
class Instant(AgentWorkflow):
    async def run(self, ctx):
        return [*ctx.prompt, {"role": "assistant", "content": "4"}]
class Exact(Grader):
    async def grade(self, ctx):
        for sid, s in ctx.samples.items():
            ctx.set_sample_reward(sid, float(s.messages[-1]["content"] == ctx.label))
'''


async def _process(path: Path, workers: int) -> tuple[float, int, int]:
    """Warm process backend: the workers start on a first batch, then PROCESS_ROLLOUTS are timed."""
    runner = RolloutRunner(path, RecordingEndpoint(), concurrency=workers, backend="process")
    async with runner:
        await runner.run_all(rows(workers))  # start the workers first
        start = time.perf_counter()
        outcomes = await runner.run_all(rows(PROCESS_ROLLOUTS))
        wall = time.perf_counter() - start
    return wall, sum(o.ok for o in outcomes), runner.peak_in_flight


def main() -> None:
    entry = Entrypoint(Instant, Exact)
    sitting = Sitting.start(
        NAME, COMMAND, CODE, rollouts=ROLLOUTS, levels=list(LEVELS), repeats=REPEATS,
        held_s=HELD_S, held_rollouts=HELD_ROLLOUTS, workers=list(WORKERS),
        process_rollouts=PROCESS_ROLLOUTS,
    )

    def record(run: dict[str, Any]) -> None:
        print(run, flush=True)
        sitting.record(run)

    n = ROLLOUTS
    for rep in range(REPEATS):
        record({"row": "direct", "repeat": rep, "rollouts": n,
                "wall_s": asyncio.run(_direct(n))})
    for conc in LEVELS:
        for rep in range(REPEATS):
            wall, ok, peak = asyncio.run(_runner(entry, n, conc))
            record({"row": "local", "concurrency": conc, "repeat": rep, "rollouts": n,
                    "wall_s": wall, "ok": ok, "peak_in_flight": peak})

    wall, ok, peak = asyncio.run(
        _runner(Entrypoint(Held, Exact), HELD_ROLLOUTS, HELD_ROLLOUTS)
    )
    record({"row": "held", "concurrency": HELD_ROLLOUTS, "rollouts": HELD_ROLLOUTS,
            "workflow_s": HELD_S, "wall_s": wall, "ok": ok, "peak_in_flight": peak})

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "main.py"
        path.write_text(_WORKER_MODULE)
        for workers in WORKERS:
            wall, ok, peak = asyncio.run(_process(path, workers))
            record({"row": "process", "concurrency": workers, "rollouts": PROCESS_ROLLOUTS,
                    "wall_s": wall, "ok": ok, "peak_in_flight": peak})
    render()


def _per_ms(run: dict[str, Any]) -> float:
    return float(run["wall_s"]) / int(run["rollouts"]) * 1000


def render() -> None:
    """Rewrite the section from ``docs/benchmarks/runner.json``."""
    sitting = Sitting.for_render(NAME, TITLE, COMMAND)
    if sitting is None:
        return
    data, runs = sitting.data, sitting.runs
    levels, repeats, held_s = data["levels"], data["repeats"], data["held_s"]
    direct_runs = [r for r in runs if r["row"] == "direct"]
    # the direct work is the sitting's first run, so any stored sitting holds one
    direct = min(_per_ms(r) for r in direct_runs)

    lines = [
        "| backend | concurrency | rollouts | wall (s) | per rollout (ms) | runner overhead (ms) "
        "| ok | peak in flight |",
        "|---|---|---|---|---|---|---|---|",
    ]
    local_per: list[float] = []
    complete = len(direct_runs) == repeats
    for conc in levels:
        reps = [r for r in runs if r["row"] == "local" and r["concurrency"] == conc]
        complete = complete and len(reps) == repeats
        if not reps:
            continue
        best = min(reps, key=lambda r: float(r["wall_s"]))
        per = _per_ms(best)
        local_per.append(per)
        n = best["rollouts"]
        lines.append(f"| local | {conc} | {n} | {best['wall_s']:.3f} | {per:.3f} | "
                     f"{per - direct:.3f} | {best['ok']}/{n} | {best['peak_in_flight']} |")
    held = next((r for r in runs if r["row"] == "held"), None)
    if held is not None:
        n = held["rollouts"]
        lines.append(
            f"| local, {held['workflow_s']:g} s workflow | {held['concurrency']} | {n} | "
            f"{held['wall_s']:.3f} | - | {(held['wall_s'] - held['workflow_s']) / n * 1000:.3f} "
            f"| {held['ok']}/{n} | {held['peak_in_flight']} |"
        )
    for r in (r for r in runs if r["row"] == "process"):
        per, n, w = _per_ms(r), r["rollouts"], r["concurrency"]
        lines.append(f"| process ({w} workers, warm) | {w} | {n} | {r['wall_s']:.3f} | "
                     f"{per:.3f} | {per - direct:.3f} | {r['ok']}/{n} | {r['peak_in_flight']} |")

    worst = max(local_per, default=float("nan")) - direct
    if not complete or held is None:
        verdict = (f"**not decided**: the sitting ended before every local row had its "
                   f"{repeats} runs")
    else:
        held_ok = held["ok"] == held["rollouts"] and held["peak_in_flight"] == held["concurrency"]
        met = worst < TARGET_MS and held_ok
        verdict = f"**{'met' if met else 'NOT met'}** (worst local overhead {worst:.3f} ms)"
    held_conc = held["concurrency"] if held is not None else data["held_rollouts"]
    at = ", ".join(map(str, levels[:-1])) + f" and {levels[-1]}" if levels[1:] else str(levels[0])
    median = f"{statistics.median(local_per):.3f} ms" if local_per else "-"
    body = (
        "Instant workflow (returns one message) + exact-match grader, `RecordingEndpoint` "
        "(in-process, no HTTP). *Runner overhead* = wall time per rollout minus the same work "
        f"done directly without the runner ({direct:.3f} ms per rollout). Best of {repeats} runs "
        f"per local row; the {held_s:g} s workflow row and the process rows ran once.\n\n"
        + "\n".join(lines)
        + f"\n\nTarget (< {TARGET_MS:g} ms overhead per rollout at {at} concurrent; "
        f"{held_conc} concurrent held without error): {verdict}. The process backend pays a "
        "pickle round trip to a worker per rollout; it is for isolation, not speed.\n\n"
        f"Median of the local rows' per-rollout time: {median}.\n"
    )
    print(body, flush=True)
    sitting.write(TITLE, body)


if __name__ == "__main__":
    if sys.argv[1:] == ["render"]:
        render()
    else:
        main()
