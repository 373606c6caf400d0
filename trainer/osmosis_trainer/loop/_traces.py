"""A bounded sample of each step's trajectories for ``osmosis dashboard``.

Per step at most ``[logging] trace_samples_per_step`` samples are written to
``<run>/traces/step_NNNNNN.jsonl`` (one JSON object per sample; the schema, :class:`TraceRecord`,
and the path, :func:`~osmosis_ai.runs.trace_file`, live in ``osmosis_ai.runs``, which the
readers use too): whole GRPO groups first, so
rewards and advantages can be compared within a group. Each sample carries its conversation
(the last policy call's messages and reply), and per training sequence the token ids, their
text, the trained mask, the sampler's logprobs and the trainer's (no-grad forward passes of the
policy over the step's traced sequences, batched, before the step's update: the weights the
sampler used when on-policy). More
than one sequence means a prefix mismatch split the sample.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

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
        temperature: float = 1.0,
    ) -> None:
        self.run_path = Path(run_path)
        self.per_step = per_step
        self.decode = decode
        self.max_tokens = max_tokens
        self.temperature = temperature

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

    def records(
        self,
        step: int,
        picked: Sequence[GradedSample],
        batch: TrainBatch,
        model: torch.nn.Module | None = None,
        device: torch.device | str = "cpu",
    ) -> list[TraceRecord]:
        """The JSON records of ``picked``; with ``model``, the trainer's logprobs too."""
        advantage = {seq.rollout_id: seq.advantage for seq in batch.sequences}
        out: list[TraceRecord] = []
        scored: list[TraceSequence] = []  # the entries that get the trainer's logprobs
        for s in picked:
            seqs: list[TraceSequence] = []
            for seq in s.sequences:
                ids = list(seq.token_ids)[: self.max_tokens]
                mask = list(seq.loss_mask)[: len(ids)]
                entry: TraceSequence = {
                    "token_ids": ids,
                    "mask": mask,
                    "sampler_logprobs": [_num(v) for v in seq.sampler_logprobs[: len(ids)]],
                    "trainer_logprobs": None,
                    "cut": len(seq.token_ids) > len(ids),
                }
                if self.decode is not None:
                    entry["tokens"] = self.decode(ids)
                if model is not None and not entry["cut"] and any(mask[1:]):
                    scored.append(entry)
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
        for chunk in _chunks(scored, _SCORE_TOKENS):
            assert model is not None  # entries are scored only with a model
            found = trainer_logprobs(
                model, [(e["token_ids"], e["mask"]) for e in chunk], device=device,
                temperature=self.temperature,
            )
            for entry, logprobs in zip(chunk, found, strict=True):
                entry["trainer_logprobs"] = logprobs
        return out

    def write(self, step: int, records: list[TraceRecord]) -> Path:
        """``traces/step_NNNNNN.jsonl`` (replaced whole: a resumed step writes it again)."""
        path = trace_file(self.run_path, step)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(r, default=str) + "\n" for r in records))
        tmp.replace(path)
        return path


_SCORE_TOKENS = 4096
"""Most padded tokens per scoring forward: a budget of 256 long traces stays bounded."""


def _chunks(entries: list[TraceSequence], budget: int) -> list[list[TraceSequence]]:
    """Consecutive groups whose padded size (rows x longest) stays within ``budget`` tokens
    (a longer sequence gets a group of its own)."""
    groups: list[list[TraceSequence]] = []
    width = 0
    for entry in entries:
        n = len(entry["token_ids"])
        if groups and (len(groups[-1]) + 1) * max(width, n) <= budget:
            groups[-1].append(entry)
            width = max(width, n)
        else:
            groups.append([entry])
            width = n
    return groups


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


def trainer_logprobs(
    model: torch.nn.Module,
    sequences: Sequence[tuple[list[int], list[int]]],
    *,
    device: torch.device | str = "cpu",
    temperature: float = 1.0,
) -> list[list[float | None]]:
    """The policy's logprob of each trained token of each ``(ids, mask)`` sequence (``None``
    elsewhere): one no-grad forward over all of them, right-padded (attention is causal, so
    padding after a token never changes its logprob)."""
    from osmosis_trainer.loop._policy import token_logprobs

    width = max(len(ids) for ids, _ in sequences)
    input_ids = torch.zeros(len(sequences), width, dtype=torch.long)  # [B, T]
    # Position t of the result scores token t+1.
    shifted = torch.zeros(len(sequences), width - 1, dtype=torch.bool)  # [B, T-1]
    for row, (ids, mask) in enumerate(sequences):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        shifted[row, : len(ids) - 1] = torch.tensor(mask[1:], dtype=torch.bool)
    was_training = model.training
    model.eval()  # no LoRA dropout: the logprob the weights give
    try:
        with torch.no_grad():
            logp, _ = token_logprobs(
                model, input_ids.to(device), shifted.to(device), temperature=temperature
            )
    finally:
        model.train(was_training)
    out: list[list[float | None]] = []
    for row, (ids, mask) in zip(logp.float().cpu().tolist(), sequences, strict=True):
        first: list[float | None] = [None]  # the first token has no logprob
        out.append(first + [
            _num(v) if m else None for v, m in zip(row[: len(ids) - 1], mask[1:], strict=True)
        ])
    return out


def token_texts(tokenizer: Tokenizer) -> Decode:
    """Each id's own text (``decode([id])``), so the page can draw one box per token."""

    def decode(ids: list[int]) -> list[str]:
        return [decode_text(tokenizer, [i]) for i in ids]

    return decode
