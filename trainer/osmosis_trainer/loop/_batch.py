"""Training sequences, the step batch, and micro-batches packed by a token budget."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from osmosis_trainer.grpo import shift_mask

__all__ = [
    "MicroBatch",
    "PackedRows",
    "PrefixUnit",
    "TrainSequence",
    "collate",
    "SharedPrefix",
    "common_prefix_len",
    "plan_micro_batches",
]


@dataclass
class TrainSequence:
    """One token sequence to train on, with its advantage.

    Attributes:
        token_ids: ``[T]`` the exact ids (prompt + completions + tool results).
        loss_mask: ``[T]`` 1 where the policy generated the token.
        sampler_logprobs: ``[T]`` the sampler's logprob of each masked token (0 elsewhere).
        advantage: the GRPO advantage of the sample this sequence belongs to.
        weight: per-sequence weight (``1/k`` when a rollout was split into ``k`` sequences).
        reward: the sample's reward (for metrics).
        group_id: the GRPO group (dataset row) of the sample.
        rollout_id: the rollout that produced it.
        truncated: True when its last completion hit the length limit.
    """

    token_ids: list[int]
    loss_mask: list[int]
    sampler_logprobs: list[float]
    advantage: float = 0.0
    weight: float = 1.0
    reward: float = 0.0
    group_id: int = 0
    rollout_id: str = ""
    truncated: bool = False
    extra: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.token_ids)
        if len(self.loss_mask) != n or len(self.sampler_logprobs) != n:
            raise ValueError(
                f"sequence {self.rollout_id!r}: token_ids ({n}), loss_mask "
                f"({len(self.loss_mask)}) and sampler_logprobs ({len(self.sampler_logprobs)}) "
                "must have the same length"
            )

    @property
    def n_trained(self) -> int:
        """How many tokens train (masked tokens after the first position)."""
        return sum(self.loss_mask[1:])


@dataclass(frozen=True)
class PrefixUnit:
    """Sequences (indices) of one group that share their first ``prefix_len`` tokens."""

    members: tuple[int, ...]
    prefix_len: int


@dataclass
class SharedPrefix:
    """Prompts shared by the rows of a micro-batch, one per GRPO group.

    Attributes:
        ids: ``[G, P]`` left-padded prefix ids.
        mask: ``[G, P]`` 1 on real prefix tokens.
        row_group: ``[B]`` which prefix each row continues.
    """

    ids: torch.Tensor
    mask: torch.Tensor
    row_group: torch.Tensor
    packed: PackedRows | None = None
    """Set when the prefixes and continuations run packed end to end in rows (``_packed``)."""


@dataclass
class PackedRows:
    """A micro-batch's prefixes and continuations laid end to end in ``R`` rows of ``L`` tokens.

    Attributes:
        ids: ``[R, L]`` token ids (pad after a row's last sequence).
        positions: ``[R, L]`` each token's position in its own sequence.
        allowed: ``[R, 1, L, L]`` bool; query ``i`` may attend key ``j``.
        gather: ``[B, S]`` per continuation position, the flat index (``r * L + t``) of the
            token whose hidden state predicts it.
    """

    ids: torch.Tensor
    positions: torch.Tensor
    allowed: torch.Tensor
    gather: torch.Tensor


@dataclass
class MicroBatch:
    """Right-padded tensors of a few sequences (shifted by one for next-token logprobs).

    Attributes:
        input_ids: ``[B, T]``.
        mask: ``[B, T-1]`` bool; position ``t`` trains token ``t + 1``.
        sampler_logp: ``[B, T-1]`` sampler logprobs aligned with ``mask``.
        advantages: ``[B]``.
        weights: ``[B]``.
    """

    input_ids: torch.Tensor
    mask: torch.Tensor
    sampler_logp: torch.Tensor
    advantages: torch.Tensor
    weights: torch.Tensor
    prefix: SharedPrefix | None = None
    """Set when the rows' prompts run once per group: ``input_ids``, ``mask`` and
    ``sampler_logp`` then hold only the part after each group's shared prefix, and position
    ``j`` trains ``input_ids[:, j]`` (no shift)."""
    rows: list[int] = field(default_factory=list)
    """Which of the update's sequences each row is (set by ``micro_batches``)."""
    starts: list[int] = field(default_factory=list)
    """Per row, the index in its sequence of the token that position 0 scores (1 for a plain
    row; the shared prefix's length for a prefixed one)."""

    @property
    def n_tokens(self) -> int:
        return int(self.mask.sum().item())


def plan_micro_batches(lengths: Sequence[int], token_budget: int) -> list[list[int]]:
    """Split sequence indices into micro-batches of at most ``token_budget`` padded tokens.

    Sequences are sorted by length (longest first) so each micro-batch pads little; a batch
    holds ``n`` sequences while ``n × longest ≤ token_budget``. A sequence longer than the
    budget gets a micro-batch of its own.

    Returns:
        Lists of indices into ``lengths``.
    """
    if token_budget < 1:
        raise ValueError(f"token_budget must be ≥ 1, got {token_budget}")
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for i in order:
        cand_longest = max(longest, lengths[i])
        if current and cand_longest * (len(current) + 1) > token_budget:
            batches.append(current)
            current, cand_longest = [], lengths[i]
        current.append(i)
        longest = cand_longest
    if current:
        batches.append(current)
    return batches


def common_prefix_len(seqs: Sequence[TrainSequence]) -> int:
    """Length of the token prefix all ``seqs`` share, capped before the first trained token
    of any of them (the prefix is context only)."""
    first = seqs[0].token_ids
    limit = min(
        next((i for i, m in enumerate(s.loss_mask) if m), len(s.loss_mask)) for s in seqs
    )
    limit = min(limit, *(len(s.token_ids) for s in seqs))
    n = 0
    while n < limit and all(s.token_ids[n] == first[n] for s in seqs[1:]):
        n += 1
    return n


def collate(
    seqs: Sequence[TrainSequence],
    *,
    pad_id: int,
    device: torch.device | str = "cpu",
) -> MicroBatch:
    """Right-pad ``seqs`` into a :class:`MicroBatch` on ``device``.

    Right padding keeps every real token at its natural position, so the model needs neither an
    attention mask nor position ids (causal attention never looks at the pads behind a token).
    """
    t_max = max(len(s.token_ids) for s in seqs)
    b = len(seqs)
    ids = torch.full((b, t_max), pad_id, dtype=torch.long)  # [B, T]
    lmask = torch.zeros((b, t_max), dtype=torch.bool)  # [B, T]
    slogp = torch.zeros((b, t_max), dtype=torch.float32)  # [B, T]
    for i, s in enumerate(seqs):
        n = len(s.token_ids)
        ids[i, :n] = torch.tensor(s.token_ids, dtype=torch.long)
        lmask[i, :n] = torch.tensor(s.loss_mask, dtype=torch.bool)
        slogp[i, :n] = torch.tensor(s.sampler_logprobs, dtype=torch.float32)
    return MicroBatch(
        input_ids=ids.to(device),
        mask=shift_mask(lmask).to(device),
        sampler_logp=slogp[:, 1:].to(device),
        advantages=torch.tensor([s.advantage for s in seqs], dtype=torch.float32, device=device),
        weights=torch.tensor([s.weight for s in seqs], dtype=torch.float32, device=device),
    )
