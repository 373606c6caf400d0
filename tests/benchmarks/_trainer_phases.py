"""Where a training step's CPU time and memory go: exclusive per-phase accounting.

The trainer benchmark's worker installs :class:`PhaseProfiler` around the trainer's own functions
(rollouts, forward + loss, backward, optimizer, adapter push) by patching their module
attributes in its throwaway process; the trainer itself carries no profiling code.
Each phase is charged only its *exclusive* time (a phase inside another pauses the outer one).
CPU time is the whole process's (``time.process_time``: every thread, torch's intra-op workers
included), which measures a phase correctly while nothing else runs: on-policy, generation and
the update never overlap. Resident memory is sampled every 20 ms by a thread; each phase keeps
the highest sample taken while it was the innermost phase.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["PhaseProfiler", "install"]

_PAGE = 4096
_SAMPLE_S = 0.02


def _rss_bytes() -> int:
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


@dataclass
class _Acc:
    cpu_s: float = 0.0
    wall_s: float = 0.0
    peak_rss: int = 0
    calls: int = 0


class PhaseProfiler:
    """A stack of named phases; time goes to the innermost one."""

    def __init__(self, base: str) -> None:
        self._lock = threading.Lock()
        self._stack = [base]
        self._acc: dict[str, _Acc] = {base: _Acc(calls=1)}
        self._cpu, self._wall = time.process_time(), time.perf_counter()
        self._snapshot: dict[str, _Acc] = {}
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _charge(self) -> None:
        cpu, wall = time.process_time(), time.perf_counter()
        acc = self._acc[self._stack[-1]]
        acc.cpu_s += cpu - self._cpu
        acc.wall_s += wall - self._wall
        self._cpu, self._wall = cpu, wall

    def _sample(self) -> None:
        while not self._stop.wait(_SAMPLE_S):
            rss = _rss_bytes()
            with self._lock:
                acc = self._acc[self._stack[-1]]
                acc.peak_rss = max(acc.peak_rss, rss)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        rss = _rss_bytes()
        with self._lock:
            self._charge()
            self._stack.append(name)
            acc = self._acc.setdefault(name, _Acc())
            acc.calls += 1
            acc.peak_rss = max(acc.peak_rss, rss)
        try:
            yield
        finally:
            rss = _rss_bytes()
            with self._lock:
                acc.peak_rss = max(acc.peak_rss, rss)
                self._charge()
                self._stack.pop()

    def mark_steady(self) -> None:
        """Per-step figures count from here (after the warm-up steps)."""
        with self._lock:
            self._charge()
            self._snapshot = {k: _Acc(v.cpu_s, v.wall_s, 0, v.calls) for k, v in self._acc.items()}

    def report(self, steps: int) -> list[dict[str, Any]]:
        """Per phase: CPU and wall seconds per steady step, and the peak RSS seen in it (GB)."""
        with self._lock:
            self._charge()
            self._stop.set()
            rows = []
            for name, acc in self._acc.items():
                before = self._snapshot.get(name, _Acc())
                rows.append({
                    "phase": name,
                    "cpu_s": (acc.cpu_s - before.cpu_s) / max(steps, 1),
                    "wall_s": (acc.wall_s - before.wall_s) / max(steps, 1),
                    "peak_rss_gb": acc.peak_rss / 1e9,
                    "calls_per_step": (acc.calls - before.calls) / max(steps, 1),
                })
            return rows


def _wrap_sync(prof: PhaseProfiler, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with prof.phase(name):
            return fn(*args, **kwargs)

    return wrapper


def _wrap_async(prof: PhaseProfiler, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        with prof.phase(name):
            return await fn(*args, **kwargs)

    return wrapper


SETUP = "setup: model load, engine copy, gateway (once)"
PHASES = (
    ("generation: rollouts through the gateway and engine", "collect"),
    ("update: forward + loss (incl. old logprobs)", "forward"),
    ("update: backward", "backward"),
    ("update: grad clip + optimizer step + rest", "update"),
    ("adapter: save + load into the engine", "push"),
    ("step: advantages, metrics, status (rest)", "step"),
)


def install(prof: PhaseProfiler) -> None:
    """Patch the trainer's phase functions (this process only) to report to ``prof``."""
    import torch

    from osmosis_trainer.loop import _source, _trainer, _update

    names = {key: label for label, key in PHASES}
    _trainer.Trainer.train = _wrap_async(prof, names["step"], _trainer.Trainer.train)  # type: ignore[method-assign]
    _trainer.Trainer._collect = _wrap_async(prof, names["collect"], _trainer.Trainer._collect)  # type: ignore[method-assign]
    setattr(_trainer, "policy_update", _wrap_sync(prof, names["update"], getattr(_trainer, "policy_update")))  # noqa: B009, B010
    _update._micro_batch_loss = _wrap_sync(prof, names["forward"], _update._micro_batch_loss)
    _update._old_logprobs = _wrap_sync(prof, names["forward"], _update._old_logprobs)
    torch.autograd.backward = _wrap_sync(prof, names["backward"], torch.autograd.backward)
    setattr(_trainer, "save_adapter", _wrap_sync(prof, names["push"], getattr(_trainer, "save_adapter")))  # noqa: B009, B010
    _source.GatewayRolloutSource.push_adapter = _wrap_async(  # type: ignore[method-assign]
        prof, names["push"], _source.GatewayRolloutSource.push_adapter
    )
