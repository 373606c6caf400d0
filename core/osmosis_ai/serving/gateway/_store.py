"""Thread-safe storage of recorded policy calls, keyed by rollout and sample."""

from __future__ import annotations

import threading
from collections import OrderedDict

from osmosis_ai.rollout import LLMCall

__all__ = ["CallStore"]

_FORGET_AFTER = 100_000  # collected rollout ids remembered to drop late records


class CallStore:
    """Calls recorded per ``(rollout_id, sample_id)``; :meth:`pop` hands them over once.

    A call that finishes after its rollout was collected (the workflow timed out while the call
    was in flight) is dropped and counted in :attr:`late_dropped` instead of leaking memory.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: dict[str, dict[str, list[LLMCall]]] = {}
        self._collected: OrderedDict[str, None] = OrderedDict()
        self.recorded = 0
        self.late_dropped = 0

    def add(self, call: LLMCall) -> bool:
        """Store ``call``; False if its rollout was already collected (the call is dropped)."""
        with self._lock:
            if call.rollout_id in self._collected:
                self.late_dropped += 1
                return False
            self._calls.setdefault(call.rollout_id, {}).setdefault(call.sample_id, []).append(call)
            self.recorded += 1
            return True

    def pop(self, rollout_id: str, *, forget: bool = True) -> dict[str, list[LLMCall]]:
        """Remove and return the calls of ``rollout_id`` in start order, keyed by sample id.

        With ``forget`` (the default), later calls for the same rollout are dropped.
        """
        with self._lock:
            samples = self._calls.pop(rollout_id, {})
            if forget:
                self._collected[rollout_id] = None
                while len(self._collected) > _FORGET_AFTER:
                    self._collected.popitem(last=False)
        return {sid: sorted(calls, key=lambda c: c.started_at) for sid, calls in samples.items()}

    def pending(self) -> dict[str, int]:
        """Number of stored calls per rollout id (for diagnostics)."""
        with self._lock:
            return {rid: sum(map(len, s.values())) for rid, s in self._calls.items()}
