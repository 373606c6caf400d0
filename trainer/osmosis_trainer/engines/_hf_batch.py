"""One padded, KV-cached decoding loop over a batch of independent chat requests."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from osmosis_trainer.engines._sampling import processed_logprobs, sample_tokens
from osmosis_trainer.engines._toolcalls import assistant_message
from osmosis_trainer.engines._types import FinishReason, GenerationResult

if TYPE_CHECKING:
    import torch

__all__ = ["Row", "generate_batch"]


@dataclass
class Row:
    """One request's state during a batch."""

    payload: Any
    prompt_ids: list[int]
    max_new: int
    temperature: float
    top_p: float
    seed: int | None
    stop: list[str]
    parse_tools: bool
    device: str = "cpu"
    out_ids: list[int] = field(default_factory=list)
    out_logprobs: list[float] = field(default_factory=list)
    finish: FinishReason | None = None
    generator: torch.Generator | None = None
    ended_by_eos: bool = False

    def __post_init__(self) -> None:
        if self.seed is not None:
            import torch

            self.generator = torch.Generator(self.device)
            self.generator.manual_seed(self.seed)

    def result(self, tokenizer: Any, model: str, version: int) -> GenerationResult:
        eos_last = self.finish == "stop" and self.ended_by_eos
        text_ids = self.out_ids[:-1] if eos_last else self.out_ids
        text = tokenizer.decode(text_ids, skip_special_tokens=False)
        if self.stop:
            cut = min((i for s in self.stop if (i := text.find(s)) != -1), default=-1)
            if cut != -1:
                text = text[:cut]
        message, calls = assistant_message(text, parse_tools=self.parse_tools)
        finish: FinishReason = self.finish or "length"
        if calls and finish == "stop":
            finish = "tool_calls"
        return GenerationResult(
            message=message,
            text=text,
            finish_reason=finish,
            tool_calls=calls,
            prompt_token_ids=self.prompt_ids,
            completion_token_ids=self.out_ids,
            logprobs=self.out_logprobs,
            model=model,
            policy_version=version,
            prompt_tokens=len(self.prompt_ids),
            completion_tokens=len(self.out_ids),
        )

    def push(self, token: int, logprob: float, eos_ids: set[int], tokenizer: Any) -> bool:
        """Append a sampled token; return True when the row is finished."""
        self.out_ids.append(token)
        self.out_logprobs.append(logprob)
        if token in eos_ids:
            self.finish, self.ended_by_eos = "stop", True
        elif self.stop and self._hit_stop(tokenizer):
            self.finish = "stop"
        elif len(self.out_ids) >= self.max_new:
            self.finish = "length"
        return self.finish is not None

    def _hit_stop(self, tokenizer: Any) -> bool:
        window = max(len(s) for s in self.stop) + 4  # tokens are at least one char (or a byte)
        tail = tokenizer.decode(self.out_ids[-window:], skip_special_tokens=False)
        return any(s in tail for s in self.stop)


def generate_batch(
    model: Any,
    rows: list[Row],
    *,
    pad_id: int,
    eos_ids: list[int],
    shared_generator: torch.Generator | None,
    tokenizer: Any,
) -> None:
    """Decode all ``rows`` together; each row ends on EOS, a stop string or its budget.

    Prompts are left-padded; finished rows leave the batch (their KV cache rows are dropped).
    """
    import torch
    from transformers import DynamicCache

    device = next(model.parameters()).device
    eos = set(eos_ids)
    width = max(len(r.prompt_ids) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)  # [B, L]
    mask = torch.zeros((len(rows), width), dtype=torch.long)  # [B, L]
    for i, r in enumerate(rows):
        ids[i, width - len(r.prompt_ids) :] = torch.tensor(r.prompt_ids)
        mask[i, width - len(r.prompt_ids) :] = 1
    ids, mask = ids.to(device), mask.to(device)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)  # [B, L] positions ignoring the left padding
    cache = DynamicCache(config=model.config)
    active = list(range(len(rows)))
    temps = torch.tensor([r.temperature for r in rows], dtype=torch.float32, device=device)
    top_p = torch.tensor([r.top_p for r in rows], dtype=torch.float32, device=device)
    out = model(
        input_ids=ids,
        attention_mask=mask,
        position_ids=pos,
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=1,
    )
    next_pos = pos[:, -1:] + 1  # [B, 1]
    while True:
        logits = out.logits[:, -1, :].float()  # [b, V]
        logprobs = processed_logprobs(logits, temps, top_p)  # [b, V]
        current = [rows[i] for i in active]
        tokens = sample_tokens(
            logprobs,
            [r.temperature == 0 for r in current],
            [r.generator for r in current],
            shared_generator,
        )  # [b]
        token_lp = logprobs.gather(1, tokens[:, None])[:, 0].tolist()
        done = [
            r.push(int(t), float(lp), eos, tokenizer)
            for r, t, lp in zip(current, tokens.tolist(), token_lp, strict=True)
        ]
        if all(done):
            return
        if any(done):
            keep = torch.tensor([j for j, d in enumerate(done) if not d], device=device)
            cache.batch_select_indices(keep)
            mask, next_pos, tokens = mask[keep], next_pos[keep], tokens[keep]
            temps, top_p = temps[keep], top_p[keep]
            active = [a for a, d in zip(active, done, strict=True) if not d]
        mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=1)  # [b, L + t]
        out = model(
            input_ids=tokens[:, None],
            attention_mask=mask,
            position_ids=next_pos,
            past_key_values=cache,
            use_cache=True,
        )
        next_pos = next_pos + 1
