"""Demonstrations as training sequences, token for token what RL would train on.

A demonstration is replayed as the policy calls the engine would have served: for each
assistant turn, the prompt is what the HF engine renders for the history before it
(:meth:`ChatRenderer.encode`: the chat template, the tools block it injects when the template
ignores ``tools``, earlier tool calls in the family's format) and the completion is the text the
model would have generated for that turn followed by the end-of-turn token the sampler stops
on. Those calls then go through the same :func:`~osmosis_trainer.trajectory.build_sequences` as
the gateway's recorded calls, so the ids and the loss mask (assistant tokens 1; system, user,
tool and template glue 0) are the ones an RL rollout producing the same conversation trains on.

The generated text of a turn is read off the template itself: the conversation rendered with
the turn, minus the prompt rendered before it, up to the end-of-turn token. That is the format
the template teaches (Hermes ``<tool_call>`` blocks, Llama 3 JSON...), which the engine's
tool-call parser reads back into the same message.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from osmosis_ai.data import Demonstration
from osmosis_ai.rollout import LLMCall, Message
from osmosis_trainer._protocols import decode_text
from osmosis_trainer.engines._chat_template import ChatRenderer, as_template_input
from osmosis_trainer.trajectory import TrainingSequence, build_sequences

if TYPE_CHECKING:
    from osmosis_trainer._protocols import CausalLM, ChatTokenizer

__all__ = ["RenderReport", "RenderedDemo", "WarmStartRenderer", "eos_token_ids"]


def eos_token_ids(model: CausalLM, tokenizer: ChatTokenizer) -> list[int]:
    """The ids the HF engine stops on (the model's generation config, its config, the
    tokenizer's EOS), as the engine computes them."""
    from osmosis_trainer.engines._hf import _eos_ids

    return _eos_ids(model, tokenizer)


@dataclass
class RenderedDemo:
    """One demonstration as training sequences (usually one; more when the template does not
    re-render earlier turns byte for byte, exactly where RL would split too)."""

    line: int
    sequences: list[TrainingSequence]

    @property
    def tokens(self) -> int:
        return sum(len(s.token_ids) for s in self.sequences)

    @property
    def trained_tokens(self) -> int:
        return sum(s.num_sampled for s in self.sequences)


@dataclass
class RenderReport:
    """What rendering kept and why it left demonstrations out."""

    demos: list[RenderedDemo] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    """Left-out demonstrations by reason (``over_max_tokens``, ``template_error``...)."""
    examples: list[str] = field(default_factory=list)
    """The first few skip messages (file line and reason)."""

    def skip(self, reason: str, message: str) -> None:
        self.skipped[reason] += 1
        if len(self.examples) < 5:
            self.examples.append(message)


class WarmStartRenderer:
    """Renders demonstrations with the engine's :class:`ChatRenderer` for ``tokenizer``."""

    def __init__(self, tokenizer: ChatTokenizer, eos_ids: Sequence[int]) -> None:
        self.tokenizer = tokenizer
        self.chat = ChatRenderer(tokenizer)
        self.eos_ids = [int(i) for i in eos_ids]
        if not self.eos_ids:
            raise ValueError("the model defines no EOS token")
        self._eos_text = {
            i: t for i in self.eos_ids if (t := decode_text(tokenizer, [i])) and t.strip()
        }

    def _ids(self, text: str) -> list[int]:
        return [int(t) for t in self.tokenizer(text, add_special_tokens=False)["input_ids"]]

    def completion_ids(
        self,
        history: list[Message],
        turn: Message,
        tools: list[dict[str, Any]] | None,  # JSON tool schemas
    ) -> list[int]:
        """The ids the engine samples for assistant ``turn`` after ``history``: the turn's
        text as the template renders it, then the end-of-turn (EOS) token.

        Raises:
            ValueError: the template renders the prompt differently once the turn is added.
        """
        prompt = self.chat.render(history, tools)  # ends with the generation prompt
        full = self._render_without_generation_prompt([*history, turn], tools)
        if not full.startswith(prompt):
            raise ValueError(
                "the chat template renders the conversation before this assistant turn "
                "differently once the turn is added (not prefix-stable)"
            )
        tail = full[len(prompt) :]
        # The turn ends at the first EOS token the template writes after it.
        ends = [(tail.find(t), i) for i, t in self._eos_text.items() if t in tail]
        if ends:
            at, eos = min(ends)
            return [*self._ids(tail[:at]), eos]
        # A template that closes turns with no EOS token: the model stops with its first EOS.
        return [*self._ids(tail.rstrip()), self.eos_ids[0]]

    def _render_without_generation_prompt(
        self, messages: list[Message], tools: list[dict[str, Any]] | None
    ) -> str:
        chat = self.chat
        prepared = chat.prepare(messages, tools)
        text = self.tokenizer.apply_chat_template(
            as_template_input(prepared),
            tools=tools if (tools and chat.renders_tools) else None,
            tokenize=False,
            add_generation_prompt=False,
        )
        return str(text)

    def calls(self, demo: Demonstration) -> list[LLMCall]:
        """The policy calls the engine would have recorded for ``demo`` (one per assistant
        turn; logprobs are zeros, the warm start does not use them)."""
        out: list[LLMCall] = []
        msgs = demo.messages
        for k, turn in enumerate(msgs):
            if turn.get("role") != "assistant":
                continue
            history = msgs[:k]
            prompt = self.chat.encode(history, demo.tools)
            completion = self.completion_ids(history, turn, demo.tools)
            out.append(
                LLMCall(
                    call_id=f"warm-{demo.line}-{k}",
                    rollout_id=f"warm-{demo.line}",
                    sample_id="warm",
                    request_messages=history,
                    tools=demo.tools,
                    response_message=turn,
                    finish_reason="stop",
                    prompt_token_ids=prompt,
                    completion_token_ids=completion,
                    logprobs=[0.0] * len(completion),
                )
            )
        return out

    def render(self, demo: Demonstration) -> RenderedDemo:
        """``demo`` as the training sequences RL would build from the same calls."""
        build = build_sequences(self.calls(demo), decode=partial(decode_text, self.tokenizer))
        return RenderedDemo(line=demo.line, sequences=build.sequences)

    def render_all(
        self, demos: Sequence[Demonstration], *, max_tokens: int, where: str = ""
    ) -> RenderReport:
        """Render every demonstration; those over ``max_tokens`` (any one sequence) or that
        the template cannot render are left out and counted, never raised."""
        report = RenderReport()
        for demo in demos:
            at = f"{where}:{demo.line}" if where else f"line {demo.line}"
            try:
                rendered = self.render(demo)
            except Exception as exc:  # the template's own error on this conversation
                report.skip("template_error", f"{at}: {exc}")
                continue
            longest = max((len(s.token_ids) for s in rendered.sequences), default=0)
            if longest > max_tokens:
                report.skip(
                    "over_max_tokens",
                    f"{at}: {longest} tokens > [warm_start] max_tokens = {max_tokens}",
                )
                continue
            if not rendered.trained_tokens:
                report.skip("no_trained_tokens", f"{at}: no assistant tokens to train on")
                continue
            report.demos.append(rendered)
        return report
