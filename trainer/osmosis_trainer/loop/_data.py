"""The data cursor: which dataset rows each step trains on, resumable from a position."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Generic, TypeVar

from osmosis_trainer.checkpoints import DataPosition

__all__ = ["DataCursor", "plan_steps"]

T = TypeVar("T")


def plan_steps(n_rows: int, batch_size: int, epochs: int, max_steps: int | None) -> int:
    """Total optimizer steps: ``epochs × ceil(n_rows / batch)``, capped by ``max_steps``."""
    if n_rows <= 0:
        return 0
    per_epoch = -(-n_rows // batch_size)
    total = per_epoch * epochs
    return min(total, max_steps) if max_steps is not None else total


class DataCursor(Generic[T]):
    """Serves batches of rows in a seeded per-epoch shuffled order.

    The order of epoch ``e`` depends only on ``(seed, e)``, so a cursor rebuilt from a saved
    :class:`DataPosition` continues exactly where the old one stopped. The last batch of an
    epoch may be smaller; the next epoch starts a fresh order.
    """

    def __init__(
        self,
        rows: Sequence[T],
        batch_size: int,
        *,
        seed: int = 0,
        shuffle: bool = True,
        position: DataPosition | None = None,
    ) -> None:
        if not rows:
            raise ValueError("the dataset has no rows")
        self.rows = rows
        self.batch_size = batch_size
        self.seed = seed
        self.shuffle = shuffle
        pos = position or DataPosition()
        self.epoch = pos.epoch
        self.offset = pos.offset
        self._order = self._epoch_order(self.epoch)

    def _epoch_order(self, epoch: int) -> list[int]:
        order = list(range(len(self.rows)))
        if self.shuffle:
            random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        return order

    @property
    def position(self) -> DataPosition:
        return DataPosition(epoch=self.epoch, offset=self.offset)

    def next_batch(self) -> list[T]:
        if self.offset >= len(self._order):
            self.epoch += 1
            self.offset = 0
            self._order = self._epoch_order(self.epoch)
        idx = self._order[self.offset : self.offset + self.batch_size]
        self.offset += len(idx)
        return [self.rows[i] for i in idx]
