"""Thread-safe storage of recorded policy calls, keyed by rollout and sample."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict

from osmosis_ai.rollout import LLMCall

__all__ = ["CallStore"]

_FORGET_AFTER = 100_000  # collected rollout ids remembered to drop late records


class CallStore:
    """Calls recorded per ``(rollout_id, sample_id)``; :meth:`pop` hands them over once.

    A call that finishes after its rollout was collected (the workflow timed out while the call
    was in flight) is dropped and counted in :attr:`late_dropped` instead of leaking memory.
    Calls of rollouts nobody collects (a client inventing rollout ids) are bounded too: beyond
    ``max_rollouts`` uncollected rollout ids, or ``ttl_s`` after a rollout's first call, the
    oldest are dropped and counted in :attr:`expired`.
    """

    def __init__(self, *, max_rollouts: int = 10_000, ttl_s: float = 6 * 3600.0) -> None:
        self._lock = threading.Lock()
        self._calls: dict[str, dict[str, list[LLMCall]]] = {}
        self._first_seen: OrderedDict[str, float] = OrderedDict()
        self._collected: OrderedDict[str, None] = OrderedDict()
        self.max_rollouts = max_rollouts
        self.ttl_s = ttl_s
        self.recorded = 0
        self.late_dropped = 0
        self.expired = 0

    def add(self, call: LLMCall, *, now: float | None = None) -> bool:
        """Store ``call``; False if its rollout was already collected (the call is dropped)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            if call.rollout_id in self._collected:
                self.late_dropped += 1
                return False
            if call.rollout_id not in self._calls:
                self._first_seen[call.rollout_id] = now
            self._calls.setdefault(call.rollout_id, {}).setdefault(call.sample_id, []).append(call)
            self.recorded += 1
            self._expire(now)
            return True

    def _expire(self, now: float) -> None:
        while self._first_seen:
            oldest, seen = next(iter(self._first_seen.items()))
            if len(self._first_seen) <= self.max_rollouts and now - seen <= self.ttl_s:
                return
            del self._first_seen[oldest]
            self.expired += sum(map(len, self._calls.pop(oldest, {}).values()))

    def pop(self, rollout_id: str, *, forget: bool = True) -> dict[str, list[LLMCall]]:
        """Remove and return the calls of ``rollout_id`` in start order, keyed by sample id.

        With ``forget`` (the default), later calls for the same rollout are dropped.
        """
        with self._lock:
            samples = self._calls.pop(rollout_id, {})
            self._first_seen.pop(rollout_id, None)
            if forget:
                self._collected[rollout_id] = None
                while len(self._collected) > _FORGET_AFTER:
                    self._collected.popitem(last=False)
        return {sid: sorted(calls, key=lambda c: c.started_at) for sid, calls in samples.items()}

    def pending(self) -> dict[str, int]:
        """Number of stored calls per rollout id (for diagnostics)."""
        with self._lock:
            return {rid: sum(map(len, s.values())) for rid, s in self._calls.items()}
