"""The turn cache: a conversation's next call prefills only its new ids, with exact logprobs."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

torch = pytest.importorskip("torch")

from osmosis_trainer.engines import ChatRenderer, HFEngine  # noqa: E402
from osmosis_trainer.engines._hf_batch import PromptHead, Row, generate_batch  # noqa: E402
from osmosis_trainer.engines._hf_turns import (  # noqa: E402
    MIN_REUSE_TOKENS,
    Turn,
    TurnCache,
    common_length,
)
from tests.trainer.engines.test_hf_batch import NO_EOS, _fresh, count_prefills  # noqa: E402

SYSTEM = "You are a calculator. Use the tools, one operation per call. " * 3


def _turn(n: int) -> Turn:
    return Turn(tuple(range(n)), [])


def test_entries_are_taken_once_capped_and_forgotten_by_rollout() -> None:
    cache = TurnCache(max_entries=2)
    cache.keep(("r1", "a"), _turn(40))
    cache.keep(("r1", "b"), _turn(40))
    cache.keep(("r2", "a"), _turn(40))  # over the cap: the least recently kept goes
    assert len(cache) == 2 and cache.take(("r1", "a"), range(50)) is None
    hit = cache.take(("r1", "b"), [*range(30), 999, 5])
    assert hit is not None and hit[0] == 30 and cache.take(("r1", "b"), range(50)) is None
    # The prompt must keep one id to prefill; a short overlap is not worth a copy.
    cache.keep(("r1", "b"), _turn(40))
    whole = cache.take(("r1", "b"), range(40))
    assert whole is not None and whole[0] == 39
    cache.keep(("r1", "b"), _turn(40))
    assert cache.take(("r1", "b"), [*range(MIN_REUSE_TOKENS - 1), -1, -2]) is None
    cache.keep(("r1", "b"), _turn(40))
    cache.forget("r1")
    assert len(cache) == 1 and cache.take(("r2", "a"), range(50)) is not None
    cache.keep(("r2", "a"), _turn(40))
    cache.clear()
    assert len(cache) == 0
    assert common_length([1, 2, 3], [1, 2, 4, 5]) == 2


def _row(renderer: ChatRenderer, messages: list[dict[str, Any]], seed: int, key: Any) -> Row:
    return Row(payload=None, prompt_ids=renderer.encode(messages, None), max_new=6,
               temperature=1.0, top_p=1.0, seed=seed, stop=[], parse_tools=False, key=key)


def test_the_next_call_of_a_conversation_prefills_only_its_new_ids(tiny_loaded: Any) -> None:
    model, tok = tiny_loaded.model.eval(), tiny_loaded.tokenizer
    renderer = ChatRenderer(tok)
    first = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is 2 + 3?"}]
    head, turns = PromptHead(), TurnCache(8)
    rows = [_row(renderer, first, seed=s, key=("r", f"s{s}")) for s in range(2)]
    with torch.inference_mode():
        generate_batch(model, rows, pad_id=0, eos_ids=NO_EOS, shared_generator=None,
                       tokenizer=tok, head=head, turns=turns)
    assert len(turns) == 2  # both samples' prompt and reply, for their next call

    def follow_up(row: Row, text: str) -> list[dict[str, Any]]:
        reply = tok.decode(row.out_ids, skip_special_tokens=True)
        return [*first, {"role": "assistant", "content": reply}, {"role": "user", "content": text}]

    second = [_row(renderer, follow_up(r, "Now add 4."), seed=10 + i, key=r.key)
              for i, r in enumerate(rows)]
    stranger = _row(renderer, [*first[:1], {"role": "user", "content": "hi"}], seed=20, key=None)
    kept = [min(common_length(turns._entries[r.key].ids, r.prompt_ids), len(r.prompt_ids) - 1)
            for r in second]
    assert min(kept) >= len(rows[0].prompt_ids)  # at least the whole first prompt
    with torch.inference_mode(), pytest.MonkeyPatch.context() as mp:
        prefilled = count_prefills(mp)
        generate_batch(model, [*second, stranger], pad_id=0, eos_ids=NO_EOS,
                       shared_generator=None, tokenizer=tok, head=head, turns=turns)
    rest = [len(r.prompt_ids) - n for r, n in zip(second, kept, strict=True)]
    # The stranger's prompt and the last one teach the head (one row), then the batch runs
    # only what neither the kept turns nor the head hold.
    assert len(head.ids) >= MIN_REUSE_TOKENS and prefilled[0] == (1, len(head.ids))
    assert prefilled[1] == (3, max(*rest, len(stranger.prompt_ids) - len(head.ids)))
    assert turns.stats["hits"] == 2 and turns.stats["reused_tokens"] == sum(kept)
    for row in [*second, stranger]:
        assert torch.allclose(_fresh(model, row), torch.tensor(row.out_logprobs), atol=1e-4), row
    assert len(turns) == 2  # the stranger has no conversation to continue


@pytest.mark.parametrize("keep_turns", [True, False])
async def test_engine_behind_the_gateway_reuses_a_samples_turn_and_forgets_it(
    tiny_loaded: Any, keep_turns: bool
) -> None:
    from osmosis_ai.serving.gateway import PolicyGateway

    engine = HFEngine(tiny_loaded, device="cpu", max_new_tokens=5, seed=0, keep_turns=keep_turns)
    scoped = "/rollouts/r1/samples/main/v1/chat/completions"
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is 2 + 3?"},
    ]
    async with PolicyGateway(engine) as gw, httpx.AsyncClient() as c:
        for text in ("Now add 4.", "Now double it."):
            resp = await c.post(gw.url + scoped, json={"model": "m", "messages": messages})
            assert resp.status_code == 200, resp.text
            messages += [resp.json()["choices"][0]["message"], {"role": "user", "content": text}]
        calls = (await gw.collect("r1"))["main"]
        turns = engine._turns
        assert len(calls) == 2
        if keep_turns:
            assert turns is not None and turns.stats["hits"] == 1 and len(turns) == 0
        else:
            assert turns is None
    await engine.close()
