from __future__ import annotations

import asyncio
import copy
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from osmosis_ai.serving import ContextLengthError, EngineError, GenerationRequest  # noqa: E402
from osmosis_trainer.engines import ChatRenderer, HFEngine, processed_logprobs  # noqa: E402
from osmosis_trainer.engines._sampling import sample_tokens  # noqa: E402
from tests.trainer.engines._adapters import peft_reference  # noqa: E402
from tests.trainer.engines._adapters import save_adapter as _save  # noqa: E402
from tests.trainer.engines._gate import EngineGate  # noqa: E402


def _req(content: str, **kw: Any) -> GenerationRequest:
    return GenerationRequest(messages=[{"role": "user", "content": content}], **kw)


def _fresh_logprobs(
    model: Any, prompt: list[int], completion: list[int], t: float, p: float
) -> Any:
    """Score the completion with one plain forward pass (no cache, no padding, no batch)."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + completion])).logits[0].float()
    steps = logits[len(prompt) - 1 : len(prompt) - 1 + len(completion)]  # [C, V]
    n = len(completion)
    lp = processed_logprobs(steps, torch.full((n,), t), torch.full((n,), p))
    return lp.gather(1, torch.tensor(completion)[:, None])[:, 0]


@pytest.fixture
async def engine(tiny_loaded: Any) -> Any:
    eng = HFEngine(tiny_loaded, device="cpu", max_batch_size=8, seed=0)
    yield eng
    await eng.close()


async def test_ids_decode_to_text_and_logprobs_match_a_fresh_forward(
    engine: HFEngine, tiny_loaded: Any
) -> None:
    # Different prompt lengths (left padding) and budgets (rows leave the batch at different
    # steps), default and processed sampling settings, all in one batch.
    settings = [(1.0, 1.0, 5), (0.7, 0.9, 9), (1.3, 1.0, 13), (1.0, 0.5, 7), (0.0, 1.0, 6)]
    reqs = [
        _req("What is 2 + 3?" * (i + 1), temperature=t, top_p=p, max_tokens=m, seed=i)
        for i, (t, p, m) in enumerate(settings)
    ]
    EngineGate(engine).hold_until_queued(len(reqs))  # one batch, whatever the thread timing
    results = await asyncio.gather(*(engine.generate(r) for r in reqs))
    assert engine.stats["batches"] == 1
    tok, eos = tiny_loaded.tokenizer, tiny_loaded.tokenizer.eos_token_id
    for req, res in zip(reqs, results, strict=True):
        ids = res.completion_token_ids
        assert ids and res.logprobs is not None and len(res.logprobs) == len(ids)
        assert res.prompt_token_ids == engine.renderer.encode(req.messages, None)
        text_ids = ids[:-1] if res.finish_reason != "length" and ids[-1] == eos else ids
        assert tok.decode(text_ids, skip_special_tokens=False) == res.text
        assert res.finish_reason == "length" or ids[-1] == eos
        assert len(ids) <= (req.max_tokens or 0)
        fresh = _fresh_logprobs(
            tiny_loaded.model, res.prompt_token_ids, ids, req.temperature, req.top_p
        )
        assert torch.allclose(fresh, torch.tensor(res.logprobs), atol=1e-4), (
            req,
            fresh,
            res.logprobs,
        )


async def test_completion_ids_are_exactly_what_was_sampled(
    engine: HFEngine, tiny_loaded: Any
) -> None:
    """A reference sampler (no cache, no batch) with the same seed draws the same tokens."""
    req = _req("Use the calculator.", temperature=0.8, top_p=0.95, max_tokens=10, seed=1234)
    others = [_req(f"noise {i}" * i, max_tokens=10) for i in range(1, 4)]
    res, *_ = await asyncio.gather(engine.generate(req), *(engine.generate(o) for o in others))
    gen = torch.Generator()
    gen.manual_seed(1234)
    ids = list(res.prompt_token_ids or [])
    sampled: list[int] = []
    with torch.no_grad():
        for _ in range(len(res.completion_token_ids or [])):
            logits = tiny_loaded.model(torch.tensor([ids])).logits[:, -1, :].float()
            lp = processed_logprobs(logits, torch.tensor([0.8]), torch.tensor([0.95]))
            t = int(sample_tokens(lp, [False], [gen], None)[0])
            sampled.append(t)
            ids.append(t)
    assert sampled == res.completion_token_ids


async def test_concurrent_requests_are_batched(engine: HFEngine) -> None:
    EngineGate(engine).hold_until_queued(8)  # all eight queued before the worker looks
    results = await asyncio.gather(
        *(engine.generate(_req(f"q{i}", max_tokens=4)) for i in range(8))
    )
    assert len(results) == 8
    assert engine.stats["batches"] == 1
    assert engine.stats["requests"] == 8


async def test_stop_string_cuts_text_but_keeps_sampled_ids(engine: HFEngine) -> None:
    first = await engine.generate(_req("hello", temperature=0.0, max_tokens=12))
    text = first.text
    assert len(text) > 6
    stop = text[3:6]
    cut = await engine.generate(_req("hello", temperature=0.0, max_tokens=12, stop=[stop]))
    assert cut.finish_reason == "stop"
    assert cut.text == text[: text.find(stop)]
    assert (cut.completion_token_ids or []) == (first.completion_token_ids or [])[
        : len(cut.completion_token_ids or [])
    ]


async def test_context_length_error(engine: HFEngine) -> None:
    with pytest.raises(ContextLengthError, match="context window"):
        await engine.generate(_req("hello 7 + 8 = 15. " * 1500, max_tokens=4))
    ok = await engine.generate(_req("still serving", max_tokens=2))
    assert ok.completion_tokens >= 1


async def test_tools_are_rendered_and_calls_parsed(engine: HFEngine) -> None:
    tools = [{"type": "function", "function": {"name": "add_numbers", "parameters": {}}}]
    res = await engine.generate(
        GenerationRequest(messages=[{"role": "user", "content": "2+3"}], tools=tools, max_tokens=2)
    )
    prompt = engine.tokenizer.decode(res.prompt_token_ids)
    assert "add_numbers" in prompt and "<tool_call>" in prompt
    hidden = await engine.generate(
        GenerationRequest(
            messages=[{"role": "user", "content": "2+3"}],
            tools=tools,
            tool_choice="none",
            max_tokens=2,
        )
    )
    assert "add_numbers" not in engine.tokenizer.decode(hidden.prompt_token_ids)


def test_renderer_injects_tools_when_the_template_ignores_them(tiny_loaded: Any) -> None:
    tok = copy.deepcopy(tiny_loaded.tokenizer)
    tok.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    renderer = ChatRenderer(tok)
    assert not renderer.renders_tools and not renderer.renders_tool_calls
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {}}}]
    history = [
        {"role": "user", "content": [{"type": "text", "text": "find x"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": '{"q":"x"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
    ]
    text = renderer.render(history, tools)
    assert text.startswith("<|im_start|>system\n# Tools")
    assert "<tools>\nlookup()\n</tools>" in text
    assert '<tool_call>\n{"name": "lookup", "arguments": {"q":"x"}}\n</tool_call>' in text
    assert "find x" in text and "None" not in text


def test_renderer_uses_the_native_tool_template(tiny_loaded: Any) -> None:
    renderer = ChatRenderer(tiny_loaded.tokenizer)
    assert renderer.renders_tools and renderer.renders_tool_calls and renderer.string_arguments


async def test_load_adapter_in_place_and_rebuilt(
    engine: HFEngine, tiny_loaded: Any, tiny_model_dir: Path, tmp_path: Path
) -> None:
    req = _req("What is 2 + 3?", temperature=0.0, max_tokens=8)
    base = await engine.generate(req)
    adapters = [
        _save(tiny_model_dir, tmp_path / "a1", 1, std=0.5),
        _save(tiny_model_dir, tmp_path / "a2", 2, std=0.5),  # same structure
        _save(tiny_model_dir, tmp_path / "a3", 3, std=0.5, r=8),  # another rank
    ]
    seen = [base.logprobs]
    for version, folder in enumerate(adapters, start=1):
        await engine.load_adapter(str(folder), version)
        assert engine.policy_version == version
        res = await engine.generate(req)
        assert res.policy_version == version and res.model.endswith(f"policy-v{version}")
        ref = peft_reference(tiny_model_dir, folder)
        fresh = _fresh_logprobs(ref, res.prompt_token_ids, res.completion_token_ids, 1.0, 1.0)
        assert torch.allclose(fresh, torch.tensor(res.logprobs), atol=1e-4)
        assert res.logprobs not in seen
        seen.append(res.logprobs)
    # The caller's model object is never wrapped or changed (the engine serves its own copy).
    assert not any("lora_" in n for n, _ in tiny_loaded.model.named_parameters())


async def test_the_shared_prompt_head_follows_adapter_loads(
    engine: HFEngine, tiny_model_dir: Path, tmp_path: Path
) -> None:
    system = {"role": "system", "content": "You are a calculator; one tool call per step. " * 3}

    def req(q: str) -> GenerationRequest:
        return GenerationRequest(
            messages=[system, {"role": "user", "content": q}], temperature=0.0, max_tokens=6
        )

    await asyncio.gather(engine.generate(req("a")), engine.generate(req("b")))
    assert engine._head is not None and len(engine._head.ids) >= 16  # learned on the base
    folder = _save(tiny_model_dir, tmp_path / "a1", 1, std=0.5)
    await engine.load_adapter(str(folder), 1)
    ref = peft_reference(tiny_model_dir, folder)
    # Served after the load, alone and then two at once (which learns the head again): each
    # matches the adapter's own forward, so no key/value of the base weights was reused.
    for batch in (["What is 2 + 3?"], ["c", "What is 4 * 5?"]):
        for res in await asyncio.gather(*(engine.generate(req(q)) for q in batch)):
            fresh = _fresh_logprobs(ref, res.prompt_token_ids, res.completion_token_ids, 1.0, 1.0)
            assert torch.allclose(fresh, torch.tensor(res.logprobs), atol=1e-4)
    assert len(engine._head.ids) >= 16


async def test_bad_adapter_keeps_serving_the_previous_version(
    engine: HFEngine, tmp_path: Path
) -> None:
    before = await engine.generate(_req("hi", temperature=0.0, max_tokens=4))
    with pytest.raises(EngineError, match="adapter_config.json"):
        await engine.load_adapter(str(tmp_path), 1)
    (tmp_path / "adapter_config.json").write_text(
        '{"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj"]}'
    )
    from safetensors.torch import save_file

    save_file(
        {"base_model.model.nonsense.lora_A.weight": torch.zeros(4, 4)},
        str(tmp_path / "adapter_model.safetensors"),
    )
    with pytest.raises(EngineError, match="could not load adapter"):
        await engine.load_adapter(str(tmp_path), 1)
    assert engine.policy_version == 0
    after = await engine.generate(_req("hi", temperature=0.0, max_tokens=4))
    assert after.completion_token_ids == before.completion_token_ids
    assert after.logprobs == pytest.approx(before.logprobs, abs=1e-6)


def test_renderer_remembers_recent_prompts(tiny_loaded: Any) -> None:
    renderer = ChatRenderer(tiny_loaded.tokenizer)
    calls: list[int] = []
    render = renderer.render

    def counted(messages: Any, tools: Any) -> str:
        calls.append(1)
        return render(messages, tools)

    renderer.render = counted  # type: ignore[method-assign]
    first = renderer.encode([{"role": "user", "content": "What is 2 + 3?"}], None)
    first.append(-1)  # callers may keep and change their list
    again = renderer.encode([{"role": "user", "content": "What is 2 + 3?"}], None)
    other = renderer.encode([{"role": "user", "content": "What is 2 + 4?"}], None)
    assert len(calls) == 2 and again == first[:-1] and other != again
    assert (
        again
        == renderer.tokenizer(
            render([{"role": "user", "content": "What is 2 + 3?"}], None), add_special_tokens=False
        )["input_ids"]
    )


async def test_exit_stops_a_running_batch_and_fails_what_is_queued(tiny_loaded: Any) -> None:
    """What the interpreter-exit hook does to an engine nobody closed: the batch on the worker
    stops at its next step, the queued request fails, and the worker thread is gone."""
    eng = HFEngine(tiny_loaded, device="cpu", max_batch_size=1, seed=0, batch_wait_ms=0)
    eng._eos_ids = []  # decode to the budget: the batch is surely still running at the exit
    gate = EngineGate(eng)
    gate.pause_at_admission()  # the worker waits between two steps of the long batch
    running = asyncio.create_task(eng.generate(_req("a long one", max_tokens=1500)))
    await gate.reached()
    queued = asyncio.create_task(eng.generate(_req("queued behind it")))
    await gate.submitted(2)
    begun, refuse = threading.Event(), eng._refuse_new_work

    def refuse_then_tell() -> Any:  # the hook has begun; it then waits for the worker
        worker = refuse()
        begun.set()
        return worker

    eng._refuse_new_work = refuse_then_tell  # type: ignore[method-assign]
    stopping = asyncio.create_task(asyncio.to_thread(eng._stop_at_exit))
    assert await asyncio.to_thread(begun.wait, 120)
    gate.release()
    await stopping
    for task in (running, queued):
        with pytest.raises(EngineError, match="the process is exiting"):
            await task
    assert eng._worker is not None and not eng._worker.is_alive()
    with pytest.raises(EngineError, match="closed"):
        await eng.generate(_req("after exit"))


def test_a_script_that_exits_while_its_engine_generates_exits_cleanly(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """No close(), the process ends mid-generation: a daemon worker still inside torch at
    teardown aborted it ("terminate called without an active exception", exit 134)."""
    script = tmp_path / "ends_early.py"
    script.write_text(
        "import asyncio, sys\n"
        "from osmosis_ai.serving import GenerationRequest\n"
        "from osmosis_trainer.engines import HFEngine\n"
        "engine = HFEngine(sys.argv[1], device='cpu', seed=0)\n"
        "async def main():\n"
        "    req = GenerationRequest(messages=[{'role': 'user', 'content': 'hi'}],\n"
        "                            max_tokens=1500, seed=0)\n"
        "    task = asyncio.ensure_future(engine.generate(req))\n"
        "    await asyncio.sleep(0.5)\n"
        "    print('leaving', task.done(), flush=True)\n"
        "asyncio.run(main())\n"
    )
    done = subprocess.run(
        [sys.executable, str(script), str(tiny_model_dir)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )
    assert "terminate called" not in done.stderr, done.stderr[-2000:]
    assert done.returncode == 0, done.stderr[-2000:]
    assert "leaving" in done.stdout
