"""The production rollout source: the user's rollout through the runner and the policy gateway."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Protocol

from osmosis_ai.config import redact_urls
from osmosis_ai.rollout import LLMCall, RolloutSample, SampleStatus
from osmosis_ai.rollout.running import RolloutGroup, RolloutOutcome, RolloutRow
from osmosis_ai.serving import FreesIdleMemory
from osmosis_trainer.loop._rollouts import GradedSample, SequenceData, StepRollouts

__all__ = ["AdapterServer", "GatewayRolloutSource", "GroupRunner", "sample_sequences"]

logger = logging.getLogger("osmosis")


class GroupRunner(Protocol):
    """What the source needs of :class:`~osmosis_ai.rollout.running.RolloutRunner`."""

    @property
    def n_samples(self) -> int:
        """Rollouts per row: the GRPO group size."""
        ...

    def run_groups(self, rows: Sequence[RolloutRow]) -> AsyncIterator[RolloutGroup]:
        """Each row's rollouts together, as soon as the row's last one finishes."""
        ...

    async def aclose(self) -> None: ...


class AdapterServer(Protocol):
    """What the source needs of the policy gateway: serving a new adapter."""

    async def swap_adapter(self, path: str, version: int) -> None: ...


def sample_sequences(calls: list[LLMCall]) -> tuple[list[SequenceData], dict[str, float]]:
    """Token-exact training sequences of one sample's calls, and trajectory counters.

    Turns merge into one sequence where the next prompt extends the previous prompt and
    completion exactly; otherwise the trajectory builder splits them and records a mismatch
    (``prefix_mismatch`` counts those, untrainable calls aside).
    """
    from osmosis_trainer.trajectory import build_sequences

    built = build_sequences(calls)
    seqs = [
        SequenceData(
            token_ids=list(s.token_ids),
            loss_mask=[int(m) for m in s.loss_mask],
            sampler_logprobs=[float(x) for x in s.sampler_logprobs],
        )
        for s in built.sequences
        if any(s.loss_mask[1:])
    ]
    counters = built.metrics()
    counters["prefix_mismatch"] = float(
        sum(1 for m in built.mismatches if m.kind != "untrainable")
    )
    return seqs, counters


class GatewayRolloutSource:
    """Runs rollouts with a :class:`~osmosis_ai.rollout.running.RolloutRunner` whose endpoint is the
    policy gateway, and swaps new adapters into the gateway's engine.

    Args:
        runner: the runner for training steps (its ``n_samples`` is the group size).
        gateway: the policy gateway (``swap_adapter``).
        make_runner: builds a runner with another ``n_samples`` (for validation).
        max_prompt_length: samples with a longer policy prompt are left out (counted).
    """

    def __init__(
        self,
        runner: GroupRunner,
        gateway: AdapterServer,
        *,
        make_runner: Callable[[int], GroupRunner] | None = None,
        max_prompt_length: int | None = None,
    ) -> None:
        self.runner = runner
        self.gateway = gateway
        self.make_runner = make_runner
        self.max_prompt_length = max_prompt_length
        self._runners: dict[int, GroupRunner] = {runner.n_samples: runner}

    def _runner(self, n_samples: int | None) -> GroupRunner:
        n = n_samples or self.runner.n_samples
        if n not in self._runners:
            if self.make_runner is None:
                raise ValueError(f"no runner for n_samples={n}")
            self._runners[n] = self.make_runner(n)
        return self._runners[n]

    async def collect(
        self, rows: Sequence[RolloutRow], *, step: int, n_samples: int | None = None
    ) -> StepRollouts:
        out = StepRollouts()
        # GRPO groups are formed once, by the runner (one group per row position, so a row
        # given twice makes two groups); the row's position is the group's id. Groups finish in
        # any order (workers, retries); the step keeps row order so that the update sums its
        # micro-batches in the same order, and trains the same weights, however they finished.
        groups = [g async for g in self._runner(n_samples).run_groups(list(rows))]
        for group in sorted(groups, key=lambda g: g.position):
            for outcome in group.outcomes:
                self._add_outcome(out, group.position, outcome)
        return out

    def _add_outcome(self, out: StepRollouts, group_id: int, outcome: RolloutOutcome) -> None:
        out.n_rollouts += 1
        if outcome.status is SampleStatus.FAILED:
            out.n_failed += 1
            category = outcome.error.category.value if outcome.error else "failed"
            out.failure_reasons[category] += 1
            if outcome.error and len(out.failure_examples) < 3:
                # failures.jsonl, the status error, train.log, the dashboard: no URL credential.
                out.failure_examples.append(
                    f"rollout {outcome.rollout_id} (row {outcome.row_index}): "
                    f"{redact_urls(outcome.error.message[:300])}"
                )
            return
        for sample in outcome.samples:
            self._add_sample(out, group_id, outcome.rollout_id, sample)

    def _add_sample(
        self, out: StepRollouts, group_id: int, rollout_id: str, sample: RolloutSample
    ) -> None:
        # LLM-judge work (osmosis_ai.grading: calls, cache hits, tokens, cost) summed per step.
        for key, value in sample.metrics.items():
            if key.startswith("judge_"):
                out.metrics[key] = out.metrics.get(key, 0.0) + value
        if not sample.trainable or sample.reward is None:
            out.n_untrainable += 1
            return
        if self.max_prompt_length is not None and any(
            len(c.prompt_token_ids or []) > self.max_prompt_length for c in sample.calls
        ):
            out.n_untrainable += 1
            out.metrics["overlong_prompts"] = out.metrics.get("overlong_prompts", 0.0) + 1
            return
        seqs, counters = sample_sequences(sample.calls)
        out.prefix_mismatch += int(counters.pop("prefix_mismatch"))
        for key, value in counters.items():
            out.metrics[key] = out.metrics.get(key, 0.0) + value
        if not seqs:
            out.n_untrainable += 1
            return
        out.samples.append(
            GradedSample(
                group_id=group_id,
                rollout_id=rollout_id,
                sample_id=sample.id,
                reward=float(sample.reward),
                sequences=seqs,
                completion_tokens=sum(len(c.completion_token_ids or []) for c in sample.calls),
                truncated=any(c.finish_reason == "length" for c in sample.calls),
                last_call=sample.calls[-1] if sample.calls else None,
                model_calls=len(sample.calls),
                tool_calls=sum(len(c.tool_calls) for c in sample.calls),
            )
        )
        out.metrics["policy_calls"] = out.metrics.get("policy_calls", 0.0) + len(sample.calls)

    async def push_adapter(self, path: Path, version: int) -> None:
        await self.gateway.swap_adapter(str(path), version)

    async def release_idle_memory(self) -> None:
        """Pass :class:`~osmosis_ai.serving.FreesIdleMemory` on to the gateway, when it can."""
        if isinstance(self.gateway, FreesIdleMemory):
            await self.gateway.release_idle_memory()

    async def aclose(self) -> None:
        for runner in self._runners.values():
            await runner.aclose()
