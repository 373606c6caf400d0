"""The remote server's memory of rollouts: one record per rollout id (and per idempotency key),
kept after the rollout ends for ``record_ttl_seconds`` within count and byte bounds."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from osmosis_ai.remote._admission import AdmissionError
from osmosis_ai.remote._protocol import (
    InitResponse,
    RolloutRequest,
    RolloutResponse,
    RolloutResult,
    RolloutState,
)
from osmosis_ai.remote._settings import ServerSettings

__all__ = ["RecordStore", "RolloutRecord", "fingerprint"]


@dataclass(eq=False)
class RolloutRecord:
    """One admitted rollout, from its init to the end of its stay in memory."""

    key: str | None
    request: RolloutRequest
    init: asyncio.Future[InitResponse]
    fingerprint: str = ""
    done: asyncio.Event = field(default_factory=asyncio.Event)
    size: int = 0
    state: RolloutState = "queued"
    tools: list[dict[str, Any]] = field(default_factory=list)
    response: RolloutResponse | None = None
    delivery_error: str | None = None
    run_task: asyncio.Task[RolloutResult] | None = None
    drive_task: asyncio.Task[None] | None = None
    finished_at: float | None = None
    runs: int = 0

    @property
    def rollout_id(self) -> str:
        return self.request.rollout_id


def fingerprint(request: RolloutRequest) -> str:
    """Identifies a request body (its idempotency key aside): retries must repeat it."""
    dump = request.model_dump_json(exclude={"idempotency_key"})
    return hashlib.sha256(dump.encode()).hexdigest()


class RecordStore:
    """Records by rollout id and by idempotency key; finished ones in age order with sizes."""

    def __init__(self, settings: ServerSettings) -> None:
        self.settings = settings
        self._by_key: dict[str, RolloutRecord] = {}
        self._by_rid: dict[str, RolloutRecord] = {}
        self.finished: OrderedDict[RolloutRecord, int] = OrderedDict()
        """Finished records, oldest first, with the bytes their result takes (as JSON)."""
        self.finished_bytes = 0

    def get(self, rollout_id: str) -> RolloutRecord | None:
        return self._by_rid.get(rollout_id)

    def __iter__(self) -> Iterator[RolloutRecord]:
        return iter(list(self._by_rid.values()))

    def find(self, request: RolloutRequest, print_: str) -> RolloutRecord | None:
        """The record this init duplicates, or None; AdmissionError 409 when it conflicts."""
        key = request.idempotency_key
        by_key = self._by_key.get(key) if key is not None else None
        by_rid = self._by_rid.get(request.rollout_id)
        if by_key is not None and by_key.rollout_id != request.rollout_id:
            raise AdmissionError(
                409, f"idempotency_key {key!r} was already used for rollout "
                f"{by_key.rollout_id!r}; use a new key for a new rollout",
            )
        rec = by_key or by_rid
        if rec is not None and rec.fingerprint != print_:
            raise AdmissionError(
                409, f"rollout {request.rollout_id!r} was already started with a different "
                "request; a retried init must repeat the same body",
            )
        return rec

    def add(self, rec: RolloutRecord) -> None:
        if rec.key is not None:
            self._by_key[rec.key] = rec
        self._by_rid[rec.rollout_id] = rec

    def forget(self, rec: RolloutRecord) -> None:
        if rec.key is not None and self._by_key.get(rec.key) is rec:
            del self._by_key[rec.key]
        if self._by_rid.get(rec.rollout_id) is rec:
            del self._by_rid[rec.rollout_id]
        self.finished_bytes -= self.finished.pop(rec, 0)

    def remember_finished(self, rec: RolloutRecord) -> None:
        """Keep ``rec`` readable, forgetting the oldest finished records beyond the count and
        byte bounds (the newest one always stays)."""
        try:
            size = len(rec.response.model_dump_json()) if rec.response is not None else 0
        except Exception:  # unserializable results were already turned into errors
            size = 0
        self.finished[rec] = size
        self.finished_bytes += size
        s = self.settings
        while len(self.finished) > 1 and (
            len(self.finished) > s.max_finished_records or self.finished_bytes > s.max_finished_bytes
        ):
            self.forget(next(iter(self.finished)))

    def prune(self, now: float | None = None) -> int:
        """Forget finished rollouts older than ``record_ttl_seconds``; returns how many."""
        now = time.monotonic() if now is None else now
        ttl = self.settings.record_ttl_seconds
        old = [r for r in self.finished if r.finished_at is not None and now - r.finished_at > ttl]
        for rec in old:
            self.forget(rec)
        return len(old)
