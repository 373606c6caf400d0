"""Runner overhead per rollout with an instant workflow, at 1, 100 and 1000 concurrent rollouts.

Run: ``python -m tests.benchmarks runner``. Target: < 1 ms of runner overhead per rollout, and
1000 concurrent rollouts held without error.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import textwrap
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

from ._report import write_section

TARGET_MS = 1.0


class Instant(AgentWorkflow[Any]):
    async def run(self, ctx: AgentWorkflowContext[Any]) -> Any:
        return [*ctx.prompt, {"role": "assistant", "content": "4"}]


class Held(AgentWorkflow[Any]):
    async def run(self, ctx: AgentWorkflowContext[Any]) -> Any:
        await asyncio.sleep(0.5)
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
        msgs = await wf.run(AgentWorkflowContext(prompt=row.prompt, metadata={}, scope=None))  # type: ignore[arg-type]
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


def _best(fn: Any, repeats: int = 3) -> Any:
    results = [asyncio.run(fn()) for _ in range(repeats)]
    return min(results, key=lambda r: r if isinstance(r, float) else r[0])


def main() -> None:
    entry = Entrypoint(Instant, Exact)
    lines = [
        "| backend | concurrency | rollouts | wall (s) | per rollout (ms) | runner overhead (ms) "
        "| ok | peak in flight |",
        "|---|---|---|---|---|---|---|---|",
    ]
    n = 3000
    direct = _best(lambda: _direct(n)) / n * 1000
    worst = 0.0
    for conc in (1, 100, 1000):
        wall, ok, peak = _best(lambda conc=conc: _runner(entry, n, conc))
        per = wall / n * 1000
        overhead = per - direct
        worst = max(worst, overhead)
        lines.append(f"| local | {conc} | {n} | {wall:.3f} | {per:.3f} | {overhead:.3f} | "
                     f"{ok}/{n} | {peak} |")
        print(lines[-1], flush=True)

    held_wall, held_ok, held_peak = asyncio.run(_runner(Entrypoint(Held, Exact), 1000, 1000))
    lines.append(f"| local, 0.5 s workflow | 1000 | 1000 | {held_wall:.3f} | - | "
                 f"{(held_wall - 0.5) / 1000 * 1000:.3f} | {held_ok}/1000 | {held_peak} |")
    print(lines[-1], flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "main.py"
        path.write_text(textwrap.dedent('''
            from osmosis_ai.rollout import AgentWorkflow, Grader
            class Instant(AgentWorkflow):
                async def run(self, ctx):
                    return [*ctx.prompt, {"role": "assistant", "content": "4"}]
            class Exact(Grader):
                async def grade(self, ctx):
                    for sid, s in ctx.samples.items():
                        ctx.set_sample_reward(sid, float(s.messages[-1]["content"] == ctx.label))
        '''))
        for conc in (1, 4):
            async def proc(conc: int = conc) -> tuple[float, int, int]:
                runner = RolloutRunner(path, RecordingEndpoint(), concurrency=conc,
                                       backend="process")
                async with runner:
                    await runner.run_all(rows(conc))  # start the workers first
                    start = time.perf_counter()
                    outcomes = await runner.run_all(rows(400))
                    wall = time.perf_counter() - start
                return wall, sum(o.ok for o in outcomes), runner.peak_in_flight

            wall, ok, peak = asyncio.run(proc())
            lines.append(f"| process ({conc} workers, warm) | {conc} | 400 | {wall:.3f} | "
                         f"{wall / 400 * 1000:.3f} | {wall / 400 * 1000 - direct:.3f} | "
                         f"{ok}/400 | {peak} |")
            print(lines[-1], flush=True)

    verdict = "met" if worst < TARGET_MS and held_ok == 1000 and held_peak == 1000 else "NOT met"
    body = (
        f"Instant workflow (returns one message) + exact-match grader, `RecordingEndpoint` "
        f"(in-process, no HTTP). *Runner overhead* = wall time per rollout minus the same work "
        f"done directly without the runner ({direct:.3f} ms per rollout). Best of 3 runs.\n\n"
        + "\n".join(lines)
        + f"\n\nTarget (< {TARGET_MS:g} ms overhead per rollout at 1, 100 and 1000 concurrent; "
        f"1000 concurrent held without error): **{verdict}** (worst local overhead "
        f"{worst:.3f} ms). The process backend pays a pickle round trip to a worker per "
        "rollout; it is for isolation, not speed.\n\n"
        f"Median of the local rows' per-rollout time: "
        f"{statistics.median([float(x.split('|')[5]) for x in lines[2:5]]):.3f} ms."
    )
    write_section("runner", "Rollout runner overhead", body, "python -m tests.benchmarks runner")


if __name__ == "__main__":
    main()
