"""A tiny in-process rollout source for loop tests: samples from the training model itself.

It bypasses the runner and the gateway (those have their own tests and the e2e test) so the
loop's bookkeeping can be tested in well under a second per step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from osmosis_trainer.loop import GradedSample, SequenceData, StepRollouts

Reward = Callable[[list[int]], float]


def even_token_reward(eos_id: int, min_len: int = 4) -> Reward:
    """Fraction of even token ids among the completion's non-EOS tokens (0 below min_len)."""

    def reward(completion: list[int]) -> float:
        body = [t for t in completion if t != eos_id]
        if len(body) < min_len:
            return 0.0
        return sum(t % 2 == 0 for t in body) / len(body)

    return reward


class ToySource:
    """Samples ``n_samples`` completions per row from ``model`` with a seeded generator.

    Rows are dicts with ``prompt_ids`` (token ids). The generator is seeded per (seed, step),
    so a resumed run draws the same completions as an uninterrupted one.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        eos_id: int,
        reward: Reward,
        n_samples: int = 4,
        max_new_tokens: int = 8,
        seed: int = 0,
        temperature: float = 1.0,
    ) -> None:
        self.model = model
        self.eos_id = eos_id
        self.reward = reward
        self.n_samples = n_samples
        self.max_new_tokens = max_new_tokens
        self.seed = seed
        self.temperature = temperature
        self.pushed: list[tuple[Path, int]] = []
        self.events: list[str] = []
        """``"release"`` and ``"push"`` in call order."""
        self.failures_per_step: int = 0

    @torch.no_grad()
    def _sample(self, prompt: list[int], n: int, gen: torch.Generator) -> tuple[Any, Any]:
        ids = torch.tensor([prompt] * n)  # [n, P]
        logps = torch.zeros(n, 0)
        done = torch.zeros(n, dtype=torch.bool)
        for _ in range(self.max_new_tokens):
            logits = self.model(input_ids=ids).logits[:, -1].float() / self.temperature  # [n, V]
            lp = torch.log_softmax(logits, -1)
            tok = torch.multinomial(lp.exp(), 1, generator=gen).squeeze(-1)  # [n]
            tok = torch.where(done, torch.full_like(tok, self.eos_id), tok)
            ids = torch.cat([ids, tok[:, None]], 1)
            logps = torch.cat([logps, lp.gather(-1, tok[:, None])], 1)
            done |= tok == self.eos_id
            if bool(done.all()):
                break
        return ids[:, len(prompt):], logps

    async def collect(
        self, rows: Sequence[Any], *, step: int, n_samples: int | None = None
    ) -> StepRollouts:
        self.model.eval()
        gen = torch.Generator().manual_seed(self.seed * 100_003 + step)
        n = n_samples or self.n_samples
        out = StepRollouts(n_rollouts=len(rows) * n)
        for row in rows:
            completions, logps = self._sample(list(row["prompt_ids"]), n, gen)
            for k in range(n):
                comp = completions[k].tolist()
                if self.eos_id in comp:
                    comp = comp[: comp.index(self.eos_id) + 1]
                prompt = list(row["prompt_ids"])
                seq = SequenceData(
                    token_ids=prompt + comp,
                    loss_mask=[0] * len(prompt) + [1] * len(comp),
                    sampler_logprobs=[0.0] * len(prompt) + logps[k, : len(comp)].tolist(),
                )
                out.samples.append(
                    GradedSample(
                        group_id=int(row["group"]),
                        rollout_id=f"s{step}-r{row['group']}-{k}",
                        sample_id="main",
                        reward=self.reward(comp),
                        sequences=[seq],
                        completion_tokens=len(comp),
                        truncated=self.eos_id not in comp,
                    )
                )
        if self.failures_per_step:
            out.n_rollouts += self.failures_per_step
            out.n_failed = self.failures_per_step
            out.failure_reasons["agent_error"] = self.failures_per_step
            out.failure_examples.append("rollout s1-x: ValueError: boom")
        return out

    async def push_adapter(self, path: Path, version: int) -> None:
        assert (path / "adapter_model.safetensors").exists()
        self.pushed.append((path, version))
        self.events.append("push")

    async def release_idle_memory(self) -> None:
        self.events.append("release")


def toy_rows(tokenizer: Any, n: int = 8) -> list[dict[str, Any]]:
    prompts = [f"What is {a} + {a + 1}?" for a in range(n)]
    return [
        {"prompt_ids": tokenizer(p)["input_ids"], "group": i} for i, p in enumerate(prompts)
    ]
