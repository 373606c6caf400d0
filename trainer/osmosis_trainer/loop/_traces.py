"""A bounded sample of each step's trajectories for ``osmosis dashboard``.

Per step at most ``[logging] trace_samples_per_step`` samples are written to
``<run>/traces/step_NNNNNN.jsonl`` (one JSON object per sample; the schema, :class:`TraceRecord`,
and the path, :func:`~osmosis_ai.runs.trace_file`, live in ``osmosis_ai.runs``, which the
readers use too): whole GRPO groups first, so
rewards and advantages can be compared within a group. Each sample carries its conversation
(the last policy call's messages and reply), and per training sequence the token ids, their
text, the trained mask, the sampler's logprobs and the trainer's. The trainer's are the ones
the step's update computed before changing the weights (the weights the sampler used when
on-policy), so tracing costs no forward pass; a sequence that did not train (its group's
rewards were all equal, or a truncation was masked) has none. More than one sequence means a
prefix mismatch split the sample.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from osmosis_ai.runs import TraceRecord, TraceSequence, trace_file
from osmosis_trainer._protocols import decode_text
from osmosis_trainer.loop._rollouts import GradedSample, StepRollouts, TrainBatch

if TYPE_CHECKING:
    from osmosis_ai.rollout import LLMCall
    from osmosis_trainer._protocols import Tokenizer

__all__ = ["TraceRecord", "TraceSampler", "TraceSequence", "token_texts"]

Decode = Callable[[list[int]], list[str]]


def _num(value: float) -> float | None:
    return round(float(value), 5) if math.isfinite(value) else None


class TraceSampler:
    """Chooses, enriches and writes the trajectories kept for one step."""

    def __init__(
        self,
        run_path: Path,
        per_step: int,
        *,
        decode: Decode | None = None,
        max_tokens: int = 4096,
    ) -> None:
        self.run_path = Path(run_path)
        self.per_step = per_step
        self.decode = decode
        self.max_tokens = max_tokens

    def pick(self, ro: StepRollouts) -> list[GradedSample]:
        """Whole groups in group order until the budget is spent (the last one may be cut)."""
        groups: dict[int, list[GradedSample]] = {}
        for s in ro.samples:
            groups.setdefault(s.group_id, []).append(s)
        out: list[GradedSample] = []
        for gid in sorted(groups):
            room = self.per_step - len(out)
            if room <= 0:
                break
            out.extend(groups[gid][:room])
        return out

    def rows(self, picked: Sequence[GradedSample], batch: TrainBatch) -> list[int]:
        """The indices in ``batch.sequences`` of the ``picked`` samples' sequences (those that
        train): the ones whose logprobs the update keeps for :meth:`records`."""
        where = _batch_index(batch)
        return [
            where[(s.rollout_id, k)]
            for s in picked
            for k in range(len(s.sequences))
            if (s.rollout_id, k) in where
        ]

    def records(
        self,
        step: int,
        picked: Sequence[GradedSample],
        batch: TrainBatch,
        logprobs: Mapping[int, Sequence[float | None]] | None = None,
    ) -> list[TraceRecord]:
        """The JSON records of ``picked``; ``logprobs`` (by index in ``batch.sequences``, as the
        update returns them) fills in the trainer's logprobs."""
        advantage = {seq.rollout_id: seq.advantage for seq in batch.sequences}
        where = _batch_index(batch)
        found = logprobs or {}
        out: list[TraceRecord] = []
        for s in picked:
            seqs: list[TraceSequence] = []
            for k, seq in enumerate(s.sequences):
                ids = list(seq.token_ids)[: self.max_tokens]
                trained = found.get(where.get((s.rollout_id, k), -1))
                entry: TraceSequence = {
                    "token_ids": ids,
                    "mask": list(seq.loss_mask)[: len(ids)],
                    "sampler_logprobs": [_num(v) for v in seq.sampler_logprobs[: len(ids)]],
                    "trainer_logprobs": (
                        None if trained is None
                        else [None if v is None else _num(v) for v in trained[: len(ids)]]
                    ),
                    "cut": len(seq.token_ids) > len(ids),
                }
                if self.decode is not None:
                    entry["tokens"] = self.decode(ids)
                seqs.append(entry)
            out.append({
                "step": step,
                "group_id": s.group_id,
                "rollout_id": s.rollout_id,
                "sample_id": s.sample_id,
                "reward": s.reward,
                # None: not trained (a zero-variance group skipped, or a masked truncation).
                "advantage": advantage.get(s.rollout_id),
                "truncated": s.truncated,
                "messages": _conversation(s.last_call),
                # The tools specs the agent sent: with the messages, a warm-start row
                # (`osmosis dataset from-run`); absent in traces of older runs.
                "tools": getattr(s.last_call, "tools", None),
                "sequences": seqs,
            })
        return out

    def write(self, step: int, records: list[TraceRecord]) -> Path:
        """``traces/step_NNNNNN.jsonl`` (replaced whole: a resumed step writes it again)."""
        path = trace_file(self.run_path, step)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(r, default=str) + "\n" for r in records))
        tmp.replace(path)
        return path


def _batch_index(batch: TrainBatch) -> dict[tuple[str, int], int]:
    """``(rollout id, k)`` -> the index in ``batch.sequences`` of that rollout's ``k``-th
    sequence (``build_train_batch`` keeps a rollout's sequences together, in order)."""
    seen = Counter[str]()
    out: dict[tuple[str, int], int] = {}
    for i, seq in enumerate(batch.sequences):
        out[(seq.rollout_id, seen[seq.rollout_id])] = i
        seen[seq.rollout_id] += 1
    return out


def _conversation(call: LLMCall | None) -> list[dict[str, Any]] | None:
    """The last policy call's request messages plus its reply (tool calls and results included)."""
    if call is None:
        return None
    messages = [*getattr(call, "request_messages", []), getattr(call, "response_message", None)]
    out = []
    for m in messages:
        if m is None:
            continue
        out.append(m.model_dump(mode="json", exclude_none=True) if hasattr(m, "model_dump")
                   else dict(m))
    return out


def token_texts(tokenizer: Tokenizer) -> Decode:
    """Each id's own text (``decode([id])``), so the page can draw one box per token."""

    def decode(ids: list[int]) -> list[str]:
        return [decode_text(tokenizer, [i]) for i in ids]

    return decode
