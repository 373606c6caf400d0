from __future__ import annotations

from typing import Any

import pytest

from osmosis_ai.rollout import LLMCall
from osmosis_ai.testing import FakeTokenizer
from osmosis_trainer.trajectory import build_sequences

TOK = FakeTokenizer()


def _call(i: int, prompt: list[int] | None, completion: list[int] | None, **kw: Any) -> LLMCall:
    return LLMCall(
        call_id=f"c{i}",
        rollout_id="r",
        sample_id="main",
        request_messages=[],
        response_message={"role": "assistant", "content": ""},
        finish_reason=kw.pop("finish_reason", "stop"),
        prompt_token_ids=prompt,
        completion_token_ids=completion,
        logprobs=[-0.5 - 0.1 * j for j in range(len(completion))] if completion else None,
        policy_version=kw.pop("version", 1),
        **kw,
    )


def test_exact_extensions_merge_with_the_right_mask() -> None:
    p1, c1 = [1, 2, 3], [10, 11]
    glue, c2 = [4, 5], [12, 13, 14]
    glue2, c3 = [6], [15]
    calls = [
        _call(0, p1, c1),
        _call(1, p1 + c1 + glue, c2),
        _call(2, p1 + c1 + glue + c2 + glue2, c3),
    ]
    build = build_sequences(calls)
    assert build.merges == 2 and build.mismatches == []
    (seq,) = build.sequences
    assert seq.token_ids == p1 + c1 + glue + c2 + glue2 + c3
    assert seq.loss_mask == [0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 0, 1]
    expected_lp = [0.0] * 3 + [-0.5, -0.6] + [0.0] * 2 + [-0.5, -0.6, -0.7] + [0.0] + [-0.5]
    assert seq.sampler_logprobs == pytest.approx(expected_lp)
    assert seq.call_ids == ["c0", "c1", "c2"] and seq.prompt_length == 3
    assert seq.num_sampled == 6


def test_prompt_equal_to_previous_sequence_merges_with_no_glue() -> None:
    build = build_sequences([_call(0, [1, 2], [3]), _call(1, [1, 2, 3], [4])])
    assert build.merges == 1 and build.sequences[0].loss_mask == [0, 0, 1, 1]


def test_template_change_splits_and_is_counted() -> None:
    calls = [_call(0, [1, 2, 3], [10, 11]), _call(1, [1, 9, 3, 10, 11, 4], [12])]
    build = build_sequences(calls)
    assert len(build.sequences) == 2 and build.merges == 0
    (m,) = build.mismatches
    assert (m.kind, m.at_call, m.position) == ("template_change", 1, 1)
    assert build.metrics()["trajectory/mismatch_template_change"] == 1.0
    assert build.sequences[1].loss_mask == [0] * 6 + [1]


def _ids(s: str) -> list[int]:
    return TOK.encode(s)


def test_retokenization_is_told_apart_with_a_decoder() -> None:
    # Sampled "ab" as one token (a fake merged id decoding to "ab"); re-encoded as "a", "b".
    merged = 999

    def decode(ids: list[int]) -> str:
        return "".join("ab" if t == merged else TOK.decode([t]) for t in ids)

    prompt = _ids("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    completion = [merged, TOK.eos_id]
    nxt = prompt + _ids("ab<|im_end|>\n<|im_start|>user\nmore<|im_end|>\n")
    calls = [_call(0, prompt, completion), _call(1, nxt, [TOK.eos_id])]
    assert build_sequences(calls, decode=decode).mismatches[0].kind == "retokenization"
    # Without a decoder a divergence inside the previous completion is reported the same way.
    assert build_sequences(calls).mismatches[0].kind == "retokenization"


def test_rewritten_completion_and_truncated_history() -> None:
    prompt = _ids("<|im_start|>assistant\n")
    completion = _ids('{"a": 1}') + [TOK.eos_id]
    rewritten = prompt + _ids('{"a":1}<|im_end|>\n')
    b = build_sequences([_call(0, prompt, completion), _call(1, rewritten, [5])], decode=TOK.decode)
    assert b.mismatches[0].kind == "completion_rewritten"
    b = build_sequences(
        [_call(0, prompt, completion), _call(1, prompt[:-1], [5])], decode=TOK.decode
    )
    assert b.mismatches[0].kind == "history_truncated"


def test_untrainable_calls_close_the_sequence() -> None:
    calls = [
        _call(0, [1], [2]),
        _call(1, None, None),
        _call(2, [1, 2, 3], [4]),
    ]
    build = build_sequences(calls)
    assert [s.call_ids for s in build.sequences] == [["c0"], ["c2"]]
    assert [m.kind for m in build.mismatches] == ["untrainable"]
    assert build.merges == 0
