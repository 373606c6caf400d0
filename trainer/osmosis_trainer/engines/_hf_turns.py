"""Each conversation's last turn, kept so that its next policy call prefills only what is new.

An agent's rollout is a chain of policy calls whose prompts grow: call ``k + 1`` repeats call
``k``'s prompt and reply, then adds a tool result or a user follow-up. Without this cache every
call prefills the whole conversation again (the shared :class:`~._hf_batch.PromptHead` covers
only the system prompt and tools block). The HF engine keys a call by its rollout and sample
(the ids the policy gateway routes by), keeps the keys/values of a finished call's prompt and
reply, and hands them to the same sample's next call for the ids the two share.

vLLM's automatic prefix caching does the same for its own engine; transformers offers it for
one conversation at a time (a ``DynamicCache`` passed back in), not for rows of a batch.
Entries belong to the weights that computed them: the owner clears them on an adapter load, and
the gateway drops a rollout's entries when it collects the rollout (:meth:`TurnCache.forget`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["MIN_REUSE_TOKENS", "Turn", "TurnCache", "TurnKey", "common_length"]

TurnKey = tuple[str, str]
"""(rollout id, sample id) of a policy call."""

MIN_REUSE_TOKENS = 16
"""A kept turn shared over fewer tokens than this is not worth its copy."""


def common_length(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading ids ``a`` and ``b`` share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@dataclass(frozen=True)
class Turn:
    """A finished call's ids (prompt, then every sampled token but the last, which was never fed
    back) and their keys/values per layer, ``[1, heads, len(ids), head_dim]`` each."""

    ids: tuple[int, ...]
    kv: list[tuple[torch.Tensor, torch.Tensor]]


class TurnCache:
    """The last turn of up to ``max_entries`` conversations, least recently kept dropped first.

    :meth:`keep` and :meth:`take` run on the engine's worker thread, :meth:`forget` on the
    gateway's: a lock guards the entries.
    """

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[TurnKey, Turn] = OrderedDict()
        self._lock = threading.Lock()
        self.stats = {"hits": 0, "reused_tokens": 0}

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def forget(self, rollout_id: str) -> None:
        """Drop every sample's entry of ``rollout_id`` (the rollout has ended)."""
        with self._lock:
            for key in [k for k in self._entries if k[0] == rollout_id]:
                del self._entries[key]

    def keep(self, key: TurnKey, turn: Turn) -> None:
        with self._lock:
            self._entries.pop(key, None)
            self._entries[key] = turn
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def take(self, key: TurnKey, prompt: Sequence[int]) -> tuple[int, Turn] | None:
        """The entry of ``key`` and how many of ``prompt``'s leading ids it covers (at least
        :data:`MIN_REUSE_TOKENS`, and one id short of the prompt, which must produce logits);
        None when there is none worth using. The entry leaves the cache either way: the call
        replaces it when it finishes."""
        with self._lock:
            turn = self._entries.pop(key, None)
        if turn is None:
            return None
        n = min(common_length(turn.ids, prompt), len(prompt) - 1)
        if n < MIN_REUSE_TOKENS:
            return None
        self.stats["hits"] += 1
        self.stats["reused_tokens"] += n
        return n, turn
