"""The eval flags users of 0.3.8 know: --name, --rows, --retry-failed, --fresh, --dataset-file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from osmosis_ai.errors import ConfigError, OsmosisError
from osmosis_ai.eval import EvalOptions, parse_rows, read_journal, run_eval
from osmosis_ai.templates import create_from_template
from osmosis_ai.testing import FakeRequest, http_error
from tests.core.eval._helpers import fake_server_factory
from tests.core.eval.test_run import _answer


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    create_from_template("single-call", "calc", tmp_path)
    return tmp_path


def _config(ws: Path) -> Path:
    return ws / "configs/eval/calc.toml"


def test_parse_rows() -> None:
    assert parse_rows("3,7,10-12") == [3, 7, 10, 11, 12]
    assert parse_rows(" 5 , 1-2,2") == [1, 2, 5]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("3,x", "'x' is not a row number or range"),
        ("5-2", "runs backwards; write 2-5"),
        ("-1", "not a row number"),
        ("", "not a row number"),
    ],
)
def test_bad_rows_are_one_line_errors(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_rows(text)


async def test_rows_select_file_positions(workspace: Path) -> None:
    result = await run_eval(
        _config(workspace),
        EvalOptions(rows="4,1,7-8", output=workspace / "out"),
        endpoint_factory=fake_server_factory(_answer),
    )
    assert sorted(r.row_index for r in result.records) == [1, 4, 7, 8]
    assert all(r.source_row_index == r.row_index for r in result.records)


async def test_rows_past_the_end_name_the_size(workspace: Path) -> None:
    rows = len((workspace / "data/calc.jsonl").read_text().splitlines())
    with pytest.raises(ConfigError, match=rf"row {rows + 5}, but .* has {rows} rows"):
        await run_eval(
            _config(workspace),
            EvalOptions(rows=f"0,{rows + 5}", output=workspace / "out"),
            endpoint_factory=fake_server_factory(_answer),
        )


async def test_named_run_continues_and_fresh_starts_over(workspace: Path) -> None:
    run_dir = workspace / ".osmosis/evals/nightly"
    first = await run_eval(
        _config(workspace),
        EvalOptions(limit=3, name="nightly"),
        endpoint_factory=fake_server_factory(_answer),
    )
    assert first.plan.run_dir == run_dir and first.new_records == 3
    again = await run_eval(
        _config(workspace),
        EvalOptions(name="nightly"),
        endpoint_factory=fake_server_factory(_answer),
    )
    assert again.new_records == 0 and again.resumed_records == 3
    with pytest.raises(OsmosisError, match="used limit=3, this command asks for limit=2"):
        await run_eval(_config(workspace), EvalOptions(limit=2, name="nightly"))
    fresh = await run_eval(
        _config(workspace),
        EvalOptions(limit=2, name="nightly", fresh=True),
        endpoint_factory=fake_server_factory(_answer),
    )
    assert fresh.new_records == 2 and fresh.resumed_records == 0
    assert len(read_journal(run_dir / "results.jsonl")) == 2


async def test_retry_failed_runs_only_the_failures_again(workspace: Path) -> None:
    def flaky(req: FakeRequest) -> object:
        question = next(m["content"] for m in req.messages if m["role"] == "user")
        return http_error(500, "overloaded") if "2" in question else _answer(req)

    first = await run_eval(
        _config(workspace),
        EvalOptions(limit=8, name="r"),
        endpoint_factory=fake_server_factory(flaky),
    )
    failed = {r.row_index for r in first.records if r.status == "failed"}
    assert failed and len(failed) < 8
    served: list[str] = []

    def counting(req: FakeRequest) -> object:
        served.append(req.messages[-1]["content"])
        return _answer(req)

    retried = await run_eval(
        _config(workspace),
        EvalOptions(name="r", retry_failed=True),
        endpoint_factory=fake_server_factory(counting),
    )
    assert len(served) == len(failed) and retried.new_records == len(failed)
    assert retried.summary.failed == 0 and retried.summary.samples == 8
    journal = read_journal(workspace / ".osmosis/evals/r/results.jsonl")
    assert len(journal) == 8 and all(r.status == "success" for r in journal)


async def test_retry_failed_needs_an_earlier_run(workspace: Path) -> None:
    with pytest.raises(ConfigError, match="--retry-failed re-runs the failed samples"):
        await run_eval(_config(workspace), EvalOptions(name="new", retry_failed=True))


async def test_dataset_file_replaces_the_configs_dataset(workspace: Path) -> None:
    other = workspace / "other.jsonl"
    other.write_text(
        "\n".join(
            json.dumps({"user_prompt": f"What is {i} + {i}?", "ground_truth": str(2 * i)})
            for i in range(4)
        )
    )
    result = await run_eval(
        _config(workspace),
        EvalOptions(dataset_file=other, output=workspace / "out"),
        endpoint_factory=fake_server_factory(_answer),
    )
    assert result.summary.samples == 4 and result.summary.reward.mean == 1.0
    assert json.loads((workspace / "out/run.json").read_text())["dataset"] == str(other)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (EvalOptions(dataset_file=Path("missing.jsonl")), "--dataset-file missing.jsonl does not"),
        (EvalOptions(name="a b"), "--name 'a b': use letters"),
        (EvalOptions(name="a", output=Path("x")), "either --name or --output"),
        (EvalOptions(fresh=True), "--fresh starts a named run over"),
    ],
)
async def test_bad_flag_values(workspace: Path, options: EvalOptions, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        await run_eval(_config(workspace), options)
