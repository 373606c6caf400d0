"""The decoding loop: continuous batching (rows joining mid-decode) and early answers."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from osmosis_ai.serving import GenerationRequest  # noqa: E402
from osmosis_trainer.engines import ChatRenderer, HFEngine  # noqa: E402
from osmosis_trainer.engines._hf_batch import (  # noqa: E402
    HFForward,
    PromptHead,
    Row,
    cache_rewrite_holds,
    can_join,
    generate_batch,
    set_kv,
)
from osmosis_trainer.engines._sampling import processed_logprobs  # noqa: E402
from tests.trainer.engines._gate import EngineGate  # noqa: E402

NO_EOS = [10**9]  # an id no model samples: rows end on their budget only


def _row(renderer: ChatRenderer, text: str, *, max_new: int, seed: int, **kw: Any) -> Row:
    system = [{"role": "system", "content": kw["system"]}] if "system" in kw else []
    prompt = renderer.encode([*system, {"role": "user", "content": text}], None)
    return Row(
        payload=None,
        prompt_ids=prompt,
        max_new=max_new,
        temperature=kw.get("temperature", 1.0),
        top_p=kw.get("top_p", 1.0),
        seed=seed,
        stop=[],
        parse_tools=False,
    )


def _fresh(model: Any, row: Row) -> Any:
    """Score the row's sampled ids with one plain forward pass (no cache, padding or batch)."""
    with torch.no_grad():
        logits = model(torch.tensor([row.prompt_ids + row.out_ids])).logits[0].float()
    n, start = len(row.out_ids), len(row.prompt_ids) - 1
    lp = processed_logprobs(
        logits[start : start + n], torch.full((n,), row.temperature), torch.full((n,), row.top_p)
    )
    return lp.gather(1, torch.tensor(row.out_ids)[:, None])[:, 0]


def test_rows_join_a_running_batch_with_exact_logprobs(tiny_loaded: Any) -> None:
    model, renderer = tiny_loaded.model.eval(), ChatRenderer(tiny_loaded.tokenizer)
    first = [
        _row(renderer, "What is 2 + 3?", max_new=12, seed=0),
        _row(renderer, "hi", max_new=4, seed=1, temperature=0.7, top_p=0.9),
    ]
    # Joining later: one prompt longer than the running cache, one shorter (both pad sides).
    late = [
        _row(renderer, "What is 2 + 3? " * 12, max_new=6, seed=2),
        _row(renderer, "yo", max_new=3, seed=3, temperature=0.0),
    ]
    calls: list[int] = []
    finished: list[int] = []

    def admit(active: int) -> list[Row]:
        calls.append(active)
        return late if len(calls) == 3 else []

    def on_done(row: Row) -> None:
        finished.append(row.seed or 0)

    with torch.inference_mode():
        generate_batch(
            model,
            first,
            pad_id=0,
            eos_ids=NO_EOS,
            shared_generator=None,
            tokenizer=tiny_loaded.tokenizer,
            admit=admit,
            on_done=on_done,
        )
    rows = first + late
    assert [len(r.out_ids) for r in rows] == [12, 4, 6, 3]
    assert all(r.finish == "length" for r in rows)
    # Short rows are answered first; the long first row finishes last.
    assert finished.index(1) < finished.index(0) and finished[-1] == 0
    assert sorted(finished) == [0, 1, 2, 3]
    for row in rows:
        assert torch.allclose(_fresh(model, row), torch.tensor(row.out_logprobs), atol=1e-4), row


def test_a_shared_prompt_is_prefilled_once_with_the_same_samples(tiny_loaded: Any) -> None:
    from osmosis_trainer.engines import _hf_batch

    model, renderer = tiny_loaded.model.eval(), ChatRenderer(tiny_loaded.tokenizer)
    prefilled: list[int] = []
    original = _hf_batch.HFForward.__call__

    def counting(self: Any, ids: Any, *args: Any, **kwargs: Any) -> Any:
        if ids.shape[1] > 1:
            prefilled.append(ids.shape[0])
        return original(self, ids, *args, **kwargs)

    def group() -> list[Row]:  # a GRPO group: one prompt, four seeded samples, plus another
        rows = [_row(renderer, "What is 2 + 3?", max_new=6, seed=s) for s in range(4)]
        return [*rows, _row(renderer, "hi", max_new=6, seed=9)]

    together = group()
    with torch.inference_mode(), pytest.MonkeyPatch.context() as mp:
        mp.setattr(_hf_batch.HFForward, "__call__", counting)
        generate_batch(model, together, pad_id=0, eos_ids=NO_EOS, shared_generator=None,
                       tokenizer=tiny_loaded.tokenizer)
        assert prefilled == [2]  # two distinct prompts for five rows
        alone = group()
        for row in alone:
            generate_batch(model, [row], pad_id=0, eos_ids=NO_EOS, shared_generator=None,
                           tokenizer=tiny_loaded.tokenizer)
    assert [r.out_ids for r in together] == [r.out_ids for r in alone]
    assert len({tuple(r.out_ids) for r in together[:4]}) > 1  # the samples still differ
    for a, b in zip(together, alone, strict=True):
        assert torch.allclose(torch.tensor(a.out_logprobs), torch.tensor(b.out_logprobs), atol=1e-4)


def count_prefills(mp: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Record the shape of each forward pass over more than one new token (a prefill)."""
    from osmosis_trainer.engines import _hf_batch

    prefilled: list[tuple[int, int]] = []
    original = _hf_batch.HFForward.__call__

    def counting(self: Any, ids: Any, *args: Any, **kwargs: Any) -> Any:
        if ids.shape[1] > 1:
            prefilled.append(tuple(ids.shape))
        return original(self, ids, *args, **kwargs)

    mp.setattr(_hf_batch.HFForward, "__call__", counting)
    return prefilled


def test_a_shared_prompt_head_is_prefilled_once_and_reused_exactly(tiny_loaded: Any) -> None:
    model, renderer = tiny_loaded.model.eval(), ChatRenderer(tiny_loaded.tokenizer)
    system = "You are a calculator. Use the tools, one operation per call. " * 3
    first = [
        _row(renderer, "What is 2 + 3?", max_new=8, seed=0, system=system),
        _row(renderer, "hi", max_new=5, seed=1, system=system, temperature=0.7, top_p=0.9),
    ]
    # Joining mid-decode: a longer and a shorter prompt with the same head, and one without it.
    late = [
        _row(renderer, "What is 2 + 3? " * 6, max_new=6, seed=2, system=system),
        _row(renderer, "yo", max_new=4, seed=3, system=system, temperature=0.0),
    ]
    stranger = [_row(renderer, "no system prompt here", max_new=3, seed=4)]
    calls: list[int] = []

    def admit(active: int) -> list[Row]:
        calls.append(active)
        return {2: late, 4: stranger}.get(len(calls), [])

    head = PromptHead()
    with torch.inference_mode(), pytest.MonkeyPatch.context() as mp:
        prefilled = count_prefills(mp)
        generate_batch(model, first, pad_id=0, eos_ids=NO_EOS, shared_generator=None,
                       tokenizer=tiny_loaded.tokenizer, admit=admit, head=head)
    shared = len(head.ids)
    assert shared >= 16 and list(head.ids) == first[0].prompt_ids[:shared]
    longest = max(len(r.prompt_ids) for r in first)
    # The head once (one row), then only the rest of each prompt; the stranger shares nothing.
    assert prefilled[0] == (1, shared) and prefilled[1] == (2, longest - shared)
    assert prefilled[2][1] == max(len(r.prompt_ids) for r in late) - shared
    assert prefilled[3] == (1, len(stranger[0].prompt_ids))
    for row in first + late + stranger:
        assert len(row.out_ids) == row.max_new
        assert torch.allclose(_fresh(model, row), torch.tensor(row.out_logprobs), atol=1e-4), row
    head.clear()
    assert head.ids == () and head.kv == []


def test_one_request_at_a_time_learns_the_head_from_the_previous_prompt(
    tiny_loaded: Any,
) -> None:
    model, renderer = tiny_loaded.model.eval(), ChatRenderer(tiny_loaded.tokenizer)
    system = "You are a careful assistant that answers with one number. " * 3
    head = PromptHead()
    rows = [_row(renderer, q, max_new=4, seed=i, system=system) for i, q in enumerate(["a", "b"])]
    with torch.inference_mode():
        for row in rows:
            generate_batch(model, [row], pad_id=0, eos_ids=NO_EOS, shared_generator=None,
                           tokenizer=tiny_loaded.tokenizer, head=head)
    assert len(head.ids) >= 16 and list(head.ids) == rows[1].prompt_ids[: len(head.ids)]
    for row in rows:
        assert torch.allclose(_fresh(model, row), torch.tensor(row.out_logprobs), atol=1e-4), row


def test_no_admission_without_a_callback_or_for_sliding_caches(tiny_loaded: Any) -> None:
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicSlidingWindowLayer

    cache = DynamicCache(config=tiny_loaded.model.config)
    assert can_join(cache)
    cache.layers[0] = DynamicSlidingWindowLayer(sliding_window=4)
    assert not can_join(cache)

    renderer = ChatRenderer(tiny_loaded.tokenizer)
    rows = [_row(renderer, "hi", max_new=3, seed=0)]
    with torch.inference_mode():
        generate_batch(
            tiny_loaded.model.eval(),
            rows,
            pad_id=0,
            eos_ids=NO_EOS,
            shared_generator=None,
            tokenizer=tiny_loaded.tokenizer,
        )
    assert len(rows[0].out_ids) == 3


async def test_engine_admits_requests_into_the_running_batch(tiny_loaded: Any) -> None:
    engine = HFEngine(tiny_loaded, device="cpu", max_batch_size=8, seed=0, batch_wait_ms=0)
    engine._eos_ids = NO_EOS  # decode to the budget, so the first batch surely runs long
    gate = EngineGate(engine)
    gate.pause_at_admission()  # the worker waits between two steps of the long batch
    try:

        def req(text: str, n: int) -> GenerationRequest:
            return GenerationRequest(
                messages=[{"role": "user", "content": text}], max_tokens=n, temperature=1.0
            )

        long = asyncio.ensure_future(engine.generate(req("What is 2 + 3?", 400)))
        await gate.reached()
        shorts = [asyncio.ensure_future(engine.generate(req(f"q{i}", 3))) for i in range(3)]
        await gate.submitted(4)  # all three queued while the long batch is paused
        gate.release()
        short = await asyncio.gather(*shorts)
        # Answered while the long request still decodes, in the same (only) batch.
        assert not long.done()
        assert [len(r.completion_token_ids or []) for r in short] == [3, 3, 3]
        assert len((await long).completion_token_ids or []) == 400
        assert engine.stats["batches"] == 1 and engine.stats["requests"] == 4
    finally:
        gate.release()
        await engine.close()


async def test_an_adapter_load_waits_for_the_batch_and_later_requests_see_it(
    tiny_loaded: Any, tiny_model_dir: Any, tmp_path: Any
) -> None:
    from peft import LoraConfig, get_peft_model

    from osmosis_trainer.engines._hf import _Load
    from osmosis_trainer.models import load_model

    base = load_model(str(tiny_model_dir)).model
    torch.manual_seed(0)
    peft_model = get_peft_model(
        base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj"], init_lora_weights=False)
    )
    peft_model.save_pretrained(tmp_path / "a1")

    engine = HFEngine(tiny_loaded, device="cpu", max_batch_size=8, seed=0, batch_wait_ms=0)
    engine._eos_ids = NO_EOS
    gate = EngineGate(engine)
    gate.pause_at_admission()
    try:

        def req(n: int) -> GenerationRequest:
            return GenerationRequest(messages=[{"role": "user", "content": "hi"}], max_tokens=n)

        long = asyncio.ensure_future(engine.generate(req(300)))
        await gate.reached()  # the long batch runs (paused between two steps)
        load = asyncio.ensure_future(engine.load_adapter(str(tmp_path / "a1"), 1))
        await gate.submitted(2)  # the load is queued behind the running batch
        after = asyncio.ensure_future(engine.generate(req(2)))
        await gate.submitted(3)  # and a request after the load
        assert isinstance(gate.items[1], _Load)
        gate.release()
        first = await long
        await load
        assert first.policy_version == 0 and (await after).policy_version == 1
        assert engine.stats["batches"] == 2  # the request queued after the load did not join
    finally:
        gate.release()
        await engine.close()


def test_the_cache_rewrite_holds_on_the_installed_transformers() -> None:
    """``set_kv`` writes transformers' ``DynamicLayer`` tensors in place (there is no API to
    left-pad or stack caches). The engine probes that at run time; here it must hold, or the
    installed transformers changed the layer and continuous batching silently lost its joins:
    read ``DynamicLayer`` in transformers/cache_utils.py, adapt ``set_kv`` and the probe, and
    re-measure against transformers' own continuous batching (python -m tests.benchmarks
    batching)."""
    import transformers

    assert cache_rewrite_holds(), f"transformers {transformers.__version__}: see the docstring"


def test_a_layer_that_works_otherwise_turns_joins_and_trims_off(
    tiny_loaded: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the probe fails (a transformers release changed ``DynamicLayer``), nothing rewrites
    a cache: no joins mid-decode, no trimmed columns, and the rows decode as they would alone."""
    from transformers.cache_utils import DynamicLayer

    cache_rewrite_holds.cache_clear()
    monkeypatch.setattr(DynamicLayer, "update", lambda self, k, v, *a, **kw: (k, v))
    try:
        assert not cache_rewrite_holds()
    finally:
        cache_rewrite_holds.cache_clear()
    monkeypatch.undo()
    cache_rewrite_holds.cache_clear()
    assert cache_rewrite_holds()

    from osmosis_trainer.engines import _hf_batch

    monkeypatch.setattr(_hf_batch, "cache_rewrite_holds", lambda: False)
    model, renderer = tiny_loaded.model.eval(), ChatRenderer(tiny_loaded.tokenizer)
    assert not can_join(HFForward(model).new_cache())
    # Rows of different lengths: the short ones leave the batch while the long one decodes.
    rows = [
        _row(renderer, "What is 2 + 3? " * 6, max_new=9, seed=0),
        _row(renderer, "hi", max_new=2, seed=1),
        _row(renderer, "yo", max_new=4, seed=2, temperature=0.0),
    ]
    asked: list[int] = []

    def admit(active: int) -> list[Row]:
        asked.append(active)
        return []

    with torch.inference_mode():
        generate_batch(model, rows, pad_id=0, eos_ids=NO_EOS, shared_generator=None,
                       tokenizer=tiny_loaded.tokenizer, admit=admit)
    assert asked == []  # no joins offered
    assert [len(r.out_ids) for r in rows] == [9, 2, 4]
    for row in rows:
        assert torch.allclose(_fresh(model, row), torch.tensor(row.out_logprobs), atol=1e-4), row


def test_a_cache_padded_through_set_kv_gives_the_unpadded_logits(tiny_loaded: Any) -> None:
    """What the probe above stands for: left-padding every layer's cache through ``set_kv`` (with
    the padding masked) changes nothing the model computes next."""
    model = tiny_loaded.model.eval()
    forward = HFForward(model)
    ids = torch.tensor([[5, 6, 7, 8]])
    step = torch.tensor([[9]])
    with torch.no_grad():
        plain, padded = forward.new_cache(), forward.new_cache()
        for cache in (plain, padded):
            forward(ids, torch.ones_like(ids), torch.arange(4)[None], cache)
        set_kv(
            padded.layers,
            [
                (torch.nn.functional.pad(x.keys, (0, 0, 2, 0)),
                 torch.nn.functional.pad(x.values, (0, 0, 2, 0)))
                for x in padded.layers
            ],
        )
        want = forward(step, torch.ones(1, 5, dtype=torch.long), torch.tensor([[4]]), plain)
        mask = torch.tensor([[0, 0, 1, 1, 1, 1, 1]])
        got = forward(step, mask, torch.tensor([[4]]), padded)
    assert padded.get_seq_length() == 7
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


def test_a_prefill_hands_the_lm_head_contiguous_rows(tiny_loaded: Any) -> None:
    """A prefill's LM head gets one contiguous row per prompt: a ``[:, -1:]`` view of the hidden
    states made torch.matmul run a bmm over a per-row copy of a frozen head (the engine's
    weights have no grad), 2.5x the whole prefill's time on SmolLM2-135M."""
    model = tiny_loaded.model.eval().requires_grad_(False)
    head = model.get_output_embeddings()
    seen: list[tuple[tuple[int, ...], bool]] = []
    hook = head.register_forward_pre_hook(
        lambda _m, args: seen.append((tuple(args[0].shape), args[0].is_contiguous()))
    )
    forward = HFForward(model)
    ids = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12]])
    try:
        with torch.no_grad():
            logits = forward(ids, torch.ones_like(ids), torch.arange(4).repeat(2, 1), forward.new_cache())
            want = model(input_ids=ids).logits[:, -1].float()
    finally:
        hook.remove()
    assert seen[0] == ((2, 1, head.in_features), True)
    torch.testing.assert_close(logits, want, rtol=0, atol=1e-5)
