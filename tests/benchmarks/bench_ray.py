"""Rollouts on Ray workers: throughput with 1, 2 and 4 workers, and the Ray path's overhead.

Run: ``python -m tests.benchmarks ray`` (needs the ``ray`` extra). A local Ray instance (one
node, 2 CPUs, 100 MB object store) is started in this process. The policy is a fake instant
engine (``osmosis_ai.testing.FakeOpenAIServer``, in a thread); each rollout makes one policy
call over HTTP and is graded by the driver's runner.

- Scaling: each rollout also waits ``IO_S`` on blocking I/O (``time.sleep``, as a synchronous
  tool or HTTP client would), which holds its worker. Target: >= 3x rollouts/s at 4 workers
  against 1.
- Overhead: an instant workflow (the policy call only), the same rollouts through the
  in-process backend and through 4 Ray workers.
- Tiny run: the same 4-step training run of a tiny model (``tests/e2e/toy_workspace``, 16
  rollouts per step) in one process and on a real two-node local Ray cluster (2 rollout
  workers), median step and rollout-phase time over steps 2-4 (step 1 includes start-up).
- Adapter sync: a rank-8 adapter of a tiny model shipped to 2 engine actors
  (``RayEnginePool.load_adapter``: object store, load, version confirmed), median of rounds.

Each measurement goes to ``docs/benchmarks/ray.json`` as it ends and the section is rendered
from that file (``python -m tests.benchmarks.bench_ray render`` redoes it without measuring).
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from osmosis_ai.data import DatasetRow
from osmosis_ai.rollout.running import LocalBackend, RolloutRunner, load_entrypoint
from osmosis_ai.testing import FakeOpenAIServer
from tests.benchmarks._stored import Sitting

NAME = "ray"
TITLE = "Ray rollout workers: scaling and overhead"
COMMAND = "python -m tests.benchmarks ray"
CODE = (
    "trainer/osmosis_trainer/distributed",
    "core/osmosis_ai/rollout",
    "tests/benchmarks/bench_ray.py",
)
"""What the section measures (its fingerprint)."""
IO_S = 0.4
N_SCALING = 32
SYNC_ROUNDS = 5
SYNC_ENGINES = 2
N_OVERHEAD = 200
TINY_STEPS = 4
TINY_ROWS = 16
TARGET = 3.0
SCALING: tuple[tuple[str, int | None], ...] = (
    ("in-process", None), ("ray 1 worker", 1), ("ray 2 workers", 2), ("ray 4 workers", 4)
)
"""The blocking workflow's backends (label, Ray workers; None: the in-process backend)."""
OVERHEAD: tuple[tuple[str, int | None], ...] = (("in-process", None), ("ray 4 workers", 4))
"""The instant workflow's backends."""

WORKFLOW = '''
import time

from osmosis_ai.rollout import AgentWorkflow, Grader

IO_S = {io_s}


class Work(AgentWorkflow):
    async def run(self, ctx):
        if IO_S:
            time.sleep(IO_S)  # blocking I/O: holds this worker
        reply = await ctx.chat(ctx.prompt)
        return [*ctx.prompt, reply.message]


class Exact(Grader):
    async def grade(self, ctx):
        for sid, sample in ctx.samples.items():
            ctx.set_sample_reward(sid, float(sample.messages[-1]["content"] == "4"))
'''


def _rows(n: int) -> list[DatasetRow]:
    return [
        DatasetRow(i, i, [{"role": "user", "content": "2+2?"}], "4", {}, None, "2+2?")
        for i in range(n)
    ]


def _entry(folder: Path, io_s: float) -> Any:
    path = folder / f"wf_{int(io_s * 1000)}.py"
    path.write_text(WORKFLOW.format(io_s=io_s))
    return load_entrypoint(str(path))


async def _measure(entry: Any, server: Any, n: int, workers: int | None) -> tuple[float, int]:
    """Rollouts/s and successful rollouts; ``workers=None`` is the in-process backend."""
    from osmosis_trainer.distributed import RayBackend

    backend: Any
    if workers is None:
        backend = LocalBackend(entry, server)
    else:
        backend = RayBackend(entry, server, workers=workers, worker_cpus=0.25)
        await backend.start()  # actor start-up is a one-off, not per step
    runner = RolloutRunner(entry, server, concurrency=64, backend=backend)
    try:
        start = time.perf_counter()
        async with runner:
            outcomes = [o async for o in runner.run(_rows(n))]
        wall = time.perf_counter() - start
    finally:
        if workers is not None:
            backend.shutdown()
    ok = sum(1 for o in outcomes if o.ok and o.reward == 1.0)
    return n / wall, ok


def _adapter_sync(folder: Path) -> tuple[list[float], int]:
    """Seconds to ship and confirm one adapter on the engine actors, per round; adapter bytes."""
    from osmosis_trainer.distributed import RayEnginePool
    from osmosis_trainer.loop._policy import attach_lora
    from osmosis_trainer.models import build_tiny_model, load_model

    model_dir = build_tiny_model(folder / "model")
    peft_model = attach_lora(load_model(str(model_dir)).model, r=8, alpha=16, dropout=0.0,
                             target_modules="all-linear", seed=0)
    adapter = folder / "adapter"
    peft_model.save_pretrained(str(adapter))
    size = sum(p.stat().st_size for p in adapter.iterdir())

    async def rounds() -> list[float]:
        pool = RayEnginePool(str(model_dir), engines=SYNC_ENGINES, cpus=0.25,
                             options={"max_new_tokens": 8, "seed": 0})
        try:
            await pool.start()
            for version in range(1, SYNC_ROUNDS + 1):
                await pool.load_adapter(str(adapter), version)
                assert pool.served_versions == [version] * SYNC_ENGINES
            return list(pool.sync_times_s)
        finally:
            await pool.close()

    return asyncio.run(rounds()), size


def _tiny_run(folder: Path, record: Callable[[dict[str, Any]], None]) -> None:
    """Steps 2-4's step and rollout-phase times (step 1 includes start-up): one process, then
    a Ray cluster; each recorded as it ends."""
    from osmosis_ai.config import load_training_config
    from osmosis_trainer.job import plan_job, run_training
    from osmosis_trainer.loop._metrics import read_metrics
    from osmosis_trainer.loop._run import create_run_dir
    from osmosis_trainer.models import build_tiny_model, load_model
    from tests.e2e.toy_workspace import make_workspace
    from tests.trainer.distributed._ray_cluster import local_cluster

    model_dir = build_tiny_model(folder / "tiny", initializer_range=0.5)
    eos = int(load_model(str(model_dir)).tokenizer.eos_token_id)

    def run(label: str, name: str, extra: str) -> None:
        cfg = make_workspace(folder / name, model_dir, eos_id=eos, rows=TINY_ROWS,
                             max_steps=TINY_STEPS,
                             extra_toml="\n[logging]\nreport_to = []\n" + extra)
        config = load_training_config(cfg)
        rd = create_run_dir(folder / "runs", name, config_file=cfg)
        result = asyncio.run(run_training(config, rd, plan=plan_job(config)))
        assert result.status == "finished", result
        train = [r for r in read_metrics(rd.path / "metrics.jsonl") if r["kind"] == "train"][1:]
        record({"part": "tiny_run", "setup": label,
                "step_s": [r["step_time_s"] for r in train],
                "rollout_s": [r["rollout_time_s"] for r in train]})

    run("one process", "single", "")
    with local_cluster() as address:
        run("ray, 2 workers", "cluster",
            f'\n[cluster]\naddress = "{address}"\nrollout_workers = 2\nworker_cpus = 0.5\n')


def main() -> None:
    import os

    try:
        import ray
    except ImportError:
        raise SystemExit(
            "the ray benchmark needs Ray: pip install 'osmosis-ai[ray]' (or run it in "
            "nox -s ray's environment)"
        ) from None

    sitting = Sitting.start(NAME, COMMAND, CODE, io_s=IO_S, n_scaling=N_SCALING,
                            n_overhead=N_OVERHEAD, sync_rounds=SYNC_ROUNDS,
                            tiny_steps=TINY_STEPS, tiny_rows=TINY_ROWS)
    # A throwaway loopback instance: no token auth (else ray.init writes ~/.ray/auth_token).
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    # No OOM killer: other jobs on this shared machine fill its memory, not these actors.
    os.environ.setdefault("RAY_memory_monitor_refresh_ms", "0")
    ray.init(num_cpus=2, object_store_memory=100 * 1024 * 1024, include_dashboard=False,
             logging_level=logging.ERROR)
    try:
        with tempfile.TemporaryDirectory() as tmp, FakeOpenAIServer(script=["4"]) as server:
            folder = Path(tmp)
            blocking, instant = _entry(folder, IO_S), _entry(folder, 0.0)
            for entry, io_s, n, backends in (
                (blocking, IO_S, N_SCALING, SCALING),
                (instant, 0.0, N_OVERHEAD, OVERHEAD),
            ):
                for label, workers in backends:
                    rate, ok = asyncio.run(_measure(entry, server, n, workers))
                    sitting.record({"part": "rollouts", "io_s": io_s, "backend": label,
                                    "workers": workers, "rollouts": n, "ok": ok,
                                    "rollouts_per_s": rate})
            sync_s, adapter_bytes = _adapter_sync(folder)
            sitting.record({"part": "adapter_sync", "engines": SYNC_ENGINES, "sync_s": sync_s,
                            "adapter_bytes": adapter_bytes})
    finally:
        ray.shutdown()
    with tempfile.TemporaryDirectory() as tmp:
        _tiny_run(Path(tmp), sitting.record)
    render()


# --- rendering: stored results -> section ------------------------------------------------


def _workflow(io_s: float) -> str:
    return f"{io_s:g} s blocking I/O" if io_s else "instant"


def _rate(runs: list[dict[str, Any]], blocking: bool, label: str) -> float | None:
    for r in runs:
        if r["part"] == "rollouts" and bool(r["io_s"]) == blocking and r["backend"] == label:
            return float(r["rollouts_per_s"])
    return None


def _scaling(runs: list[dict[str, Any]]) -> str:
    one, two, four = (_rate(runs, True, label) for label, _ in SCALING[1:])
    if not (one and two and four):
        return "Scaling: not every worker count has a stored run yet."
    speedup = four / one
    verdict = "met" if speedup >= TARGET else "NOT met"
    return (
        f"Scaling: 4 workers vs 1 = {speedup:.2f}x (target >= {TARGET:g}x: {verdict}); "
        f"2 workers vs 1 = {two / one:.2f}x. "
        "A worker runs its workflows concurrently (an async actor), so I/O that awaits does not "
        "need more workers; blocking work (sync tools, CPU) does, and that is what scales here."
    )


def _overhead(runs: list[dict[str, Any]]) -> str:
    local, ray4 = (_rate(runs, False, label) for label, _ in OVERHEAD)
    if not (local and ray4):
        return "Ray overhead on an instant workflow: not measured yet in this sitting."
    return (
        f"Ray overhead on an instant workflow: {(1 / ray4 - 1 / local) * 1000:+.2f} ms per "
        f"rollout ({local:.0f} vs {ray4:.0f} rollouts/s in-process vs 4 Ray workers; one run per "
        "row, so a difference of a millisecond or two needs repeated runs to tell from noise; "
        "Ray's workers can also use the second core while the in-process path is one "
        "interpreter)."
    )


def render() -> None:
    """Rewrite the section from ``docs/benchmarks/ray.json``."""
    sitting = Sitting.for_render(NAME, TITLE, COMMAND)
    if sitting is None:
        return
    data, runs = sitting.data, sitting.runs
    rows = [
        f"| {_workflow(r['io_s'])} | {r['backend']} | {r['rollouts']} | {r['ok']} "
        f"| {r['rollouts_per_s']:.1f} |"
        for r in runs
        if r["part"] == "rollouts"
    ]
    tiny = {
        r["setup"]: (statistics.median(r["step_s"]), statistics.median(r["rollout_s"]))
        for r in runs
        if r["part"] == "tiny_run"
    }
    lines = [
        "| workflow | backend | rollouts | ok | rollouts/s |",
        "|---|---|---|---|---|",
        *rows,
        "",
        _scaling(runs),
        _overhead(runs),
        "",
        f"| tiny run ({data['tiny_steps']} steps x {data['tiny_rows']} rollouts) "
        "| median step s | median rollout phase s |",
        "|---|---|---|",
        *(f"| {k} | {v[0]:.2f} | {v[1]:.2f} |" for k, v in tiny.items()),
        "",
    ]
    single, cluster = tiny.get("one process"), tiny.get("ray, 2 workers")
    if single and cluster:
        lines.append(
            f"Ray path overhead on the tiny run: {cluster[0] - single[0]:+.2f} s per step "
            f"({cluster[0] / single[0]:.2f}x; median over steps 2-{data['tiny_steps']}, step 1 "
            "includes start-up). A tiny model's step takes a fraction of a second, so this is "
            "the Ray path's per-step cost at its smallest, with nothing for the workers to "
            "spread."
        )
    sync = next((r for r in runs if r["part"] == "adapter_sync"), None)
    if sync is not None and sync["sync_s"]:
        lines.append(
            f"Adapter sync per step ({sync['engines']} engine actors, "
            f"{sync['adapter_bytes'] / 1e6:.2f} MB adapter of a tiny model, object store, each "
            f"engine confirms the version): median {statistics.median(sync['sync_s']) * 1000:.0f}"
            f" ms over {len(sync['sync_s'])} steps. Rollout workers never hold weights."
        )
    body = "\n".join(lines)
    print(body, flush=True)
    sitting.write(TITLE, body)


if __name__ == "__main__":
    if sys.argv[1:] == ["render"]:
        render()
    else:
        main()
