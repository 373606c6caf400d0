"""Training sequences from recorded policy calls, token-exact.

A sample's calls become one sequence as long as each call's prompt ids *extend* everything
before it exactly: ``prompt[k+1][:len(seq)] == seq`` where ``seq`` is the sequence so far
(prompt k + completion k, and earlier turns). The completion tokens get loss mask 1 and keep
their sampler logprobs; the extension between two completions (tool results, the next user turn,
template glue) gets mask 0 and logprob 0. When a prompt does not extend the sequence, the sample
is split: the sequence is closed and a new one starts at that call, and the mismatch is counted.

Mismatch kinds (how the split is classified):

- ``retokenization``: the new prompt holds the same text as the sequence so far, but
  different ids (BPE is not bijective: sampled ``H+AVING``, re-encoded ``HAV+ING``). Needs
  ``decode``; without it, a divergence inside the previous completion is reported as this.
- ``template_change``: the ids diverge *before* the previous completion, in the earlier
  prompt or history (a template that is not prefix-stable, or history edited, summarised or
  dropped by the framework).
- ``completion_rewritten``: the ids diverge inside the previous completion and the text
  differs too (tool arguments re-serialised, reasoning dropped, a stop string cut off).
- ``history_truncated``: the new prompt is a strict prefix of the sequence so far.
- ``untrainable``: the call has no token data (hosted engine) or an empty completion; it
  closes the current sequence and is left out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Literal

from pydantic import BaseModel, Field

from osmosis_ai.rollout import LLMCall

__all__ = ["Mismatch", "MismatchKind", "TrainingSequence", "TrajectoryBuild", "build_sequences"]

MismatchKind = Literal[
    "retokenization", "template_change", "completion_rewritten", "history_truncated", "untrainable"
]


class TrainingSequence(BaseModel):
    """One row of training data: a token sequence with its loss mask and sampler logprobs."""

    token_ids: list[int]
    loss_mask: list[int]
    """1 for sampled tokens (trained on), 0 for prompt, tool results and template glue."""
    sampler_logprobs: list[float]
    """The engine's logprob of each sampled token; 0.0 where ``loss_mask`` is 0."""
    call_ids: list[str]
    """The calls merged into this sequence, in order."""
    policy_versions: list[int | None] = Field(default_factory=list)
    """The policy version that served each merged call."""
    prompt_length: int = 0
    """Tokens before the first sampled token."""
    finish_reason: str = ""
    """The finish reason of the last merged call ("length" means truncated)."""

    @property
    def num_sampled(self) -> int:
        return sum(self.loss_mask)


class Mismatch(BaseModel):
    """Why call ``at_call`` could not be merged into the sequence before it."""

    kind: MismatchKind
    at_call: int
    """Index (in the calls given to :func:`build_sequences`) of the call that starts anew."""
    call_id: str
    position: int | None = None
    """Token index where the new prompt first differs from the sequence so far."""
    detail: str = ""


class TrajectoryBuild(BaseModel):
    """The sequences of one sample, with merge and mismatch statistics."""

    sequences: list[TrainingSequence]
    merges: int = 0
    """How many calls were appended to an earlier call's sequence."""
    mismatches: list[Mismatch] = Field(default_factory=list)

    def mismatch_counts(self) -> dict[str, int]:
        return dict(Counter(m.kind for m in self.mismatches))

    def metrics(self) -> dict[str, float]:
        """Flat counters for the trainer's metrics (``trajectory/...``)."""
        out = {
            "trajectory/sequences": float(len(self.sequences)),
            "trajectory/merges": float(self.merges),
            "trajectory/mismatches": float(len(self.mismatches)),
        }
        for kind, n in self.mismatch_counts().items():
            out[f"trajectory/mismatch_{kind}"] = float(n)
        return out


class _Open:
    """The sequence being built."""

    def __init__(self, call: LLMCall) -> None:
        prompt = list(call.prompt_token_ids or [])
        completion = list(call.completion_token_ids or [])
        self.tokens = prompt + completion
        self.mask = [0] * len(prompt) + [1] * len(completion)
        self.logprobs = [0.0] * len(prompt) + list(call.logprobs or [])
        self.call_ids = [call.call_id]
        self.versions: list[int | None] = [call.policy_version]
        self.prompt_length = len(prompt)
        self.last_completion_start = len(prompt)
        self.finish = call.finish_reason

    def extend(self, call: LLMCall) -> None:
        prompt = call.prompt_token_ids or []
        completion = list(call.completion_token_ids or [])
        glue = list(prompt[len(self.tokens) :])
        self.tokens += glue
        self.mask += [0] * len(glue)
        self.logprobs += [0.0] * len(glue)
        self.last_completion_start = len(self.tokens)
        self.tokens += completion
        self.mask += [1] * len(completion)
        self.logprobs += list(call.logprobs or [])
        self.call_ids.append(call.call_id)
        self.versions.append(call.policy_version)
        self.finish = call.finish_reason

    def close(self) -> TrainingSequence:
        return TrainingSequence(
            token_ids=self.tokens,
            loss_mask=self.mask,
            sampler_logprobs=self.logprobs,
            call_ids=self.call_ids,
            policy_versions=self.versions,
            prompt_length=self.prompt_length,
            finish_reason=self.finish,
        )


def _first_divergence(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def _classify(
    seq: _Open, prompt: list[int], decode: Callable[[list[int]], str] | None
) -> tuple[MismatchKind, int, str]:
    d = _first_divergence(seq.tokens, prompt)
    if d == len(prompt):
        return "history_truncated", d, f"the prompt ({len(prompt)} tokens) is a strict prefix"
    if decode is not None:
        before, after = decode(seq.tokens), decode(prompt)
        if after.startswith(before):
            return "retokenization", d, "same text, different token ids"
    if d < seq.last_completion_start:
        return "template_change", d, "the earlier prompt or history differs"
    if decode is None:
        return "retokenization", d, "ids differ inside the previous completion (no decoder)"
    return "completion_rewritten", d, "the previous completion came back as different text"


def build_sequences(
    calls: Sequence[LLMCall], *, decode: Callable[[list[int]], str] | None = None
) -> TrajectoryBuild:
    """Merge one sample's calls (in call order) into training sequences.

    Args:
        calls: the sample's recorded calls, in the order they were made.
        decode: ``ids -> text`` (e.g. ``lambda ids: tok.decode(ids)``), used only to tell
            re-tokenisation from other mismatches.

    Returns:
        The sequences (at least one per run of mergeable trainable calls), the number of
        merges, and every mismatch with its kind (see the module docstring).
    """
    sequences: list[TrainingSequence] = []
    mismatches: list[Mismatch] = []
    merges = 0
    current: _Open | None = None
    for i, call in enumerate(calls):
        if not call.trainable or not call.completion_token_ids:
            if current is not None:
                sequences.append(current.close())
                current = None
            mismatches.append(
                Mismatch(
                    kind="untrainable",
                    at_call=i,
                    call_id=call.call_id,
                    detail="no token ids/logprobs, or an empty completion",
                )
            )
            continue
        prompt = list(call.prompt_token_ids or [])
        if current is None:
            current = _Open(call)
            continue
        if prompt[: len(current.tokens)] == current.tokens and len(prompt) >= len(current.tokens):
            current.extend(call)
            merges += 1
            continue
        kind, pos, detail = _classify(current, prompt, decode)
        mismatches.append(
            Mismatch(kind=kind, at_call=i, call_id=call.call_id, position=pos, detail=detail)
        )
        sequences.append(current.close())
        current = _Open(call)
    if current is not None:
        sequences.append(current.close())
    return TrajectoryBuild(sequences=sequences, merges=merges, mismatches=mismatches)
