"""``osmosis eval rubric``: a dataset's answers scored by a scripted judge behind the gateway."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from osmosis_ai.cli import main
from osmosis_ai.serving.gateway import PolicyGateway
from osmosis_ai.testing import FakeRequest, ScriptedEngine
from tests.core.grading._helpers import graded_response

RUBRIC = "Full marks for telling the user which button to press."
ROWS = [
    {"user_prompt": "How do I reset my password?", "solution_str": "Press 'Forgot password'."},
    {"user_prompt": "How do I log out?", "solution_str": "Press 'Log out' in the menu."},
    {"user_prompt": "How do I delete my account?", "solution_str": "No idea."},
]


def _judge(req: FakeRequest) -> str:
    response = graded_response(req)
    if "No idea" in response:
        return "I cannot say."  # never valid JSON: a judge failure, not a zero
    return json.dumps({"score": 1.0 if "Press" in response else 0.0, "reasons": "names it"})


@pytest.fixture
def judge_url() -> Iterator[str]:
    with PolicyGateway(ScriptedEngine(per_sample=False, script=_judge), sampling=None) as gw:
        yield f"{gw.url}/v1"


def _dataset(tmp_path: Path) -> Path:
    path = tmp_path / "answers.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return path


def test_eval_rubric_prints_the_eval_summary_with_judge_usage(
    tmp_path: Path, judge_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    rubric = tmp_path / "rubric.md"
    rubric.write_text(RUBRIC)
    out_dir = tmp_path / "run"
    args = ["eval", "rubric", "-d", str(_dataset(tmp_path)), "-r", str(rubric)]
    code = main([*args, "--model", judge_url, "-n", "2", "-o", str(out_dir)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "6 samples" in out and "n=2" in out
    assert "4 success, 2 failed" in out and "judge_error 2" in out
    assert "I cannot say." in out  # the failure keeps the judge's raw reply
    assert "judge" in out and "cache hits" in out
    records = [json.loads(line) for line in (out_dir / "results.jsonl").read_text().splitlines()]
    assert sorted((r["row_index"], r["run_index"]) for r in records) == [
        (i, j) for i in range(3) for j in range(2)
    ]
    assert {r["reward"] for r in records if r["row_index"] < 2} == {1.0}
    failed = [r for r in records if r["status"] == "failed"]
    assert len(failed) == 2 and all(r["reward"] is None for r in failed)
    trace = json.loads((out_dir / records[0]["trace"]).read_text())
    assert trace["verdict"]["reasons"] == "names it" and trace["answer"]
    summary = json.loads((out_dir / "summary.json").read_text())
    assert summary["judge"]["calls"] == 4 + 2 * 3  # two failed rows: 3 calls each


def test_eval_rubric_json_and_the_cache_across_runs(
    tmp_path: Path, judge_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _dataset(tmp_path)
    base = ["eval", "rubric", "-d", str(data), "-r", RUBRIC, "--model", judge_url, "--json"]
    cache = ["--cache", str(tmp_path / "cache.jsonl"), "--limit", "2"]
    assert main([*base, *cache, "-o", str(tmp_path / "a")]) == 0
    first = json.loads(capsys.readouterr().out)
    assert main([*base, *cache, "-o", str(tmp_path / "b")]) == 0
    second = json.loads(capsys.readouterr().out)
    assert first["summary"]["reward"]["mean"] == second["summary"]["reward"]["mean"] == 1.0
    assert first["judge"]["calls"] == 2 and first["judge"]["cache_hits"] == 0
    assert second["judge"]["calls"] == 0 and second["judge"]["cache_hits"] == 2
    assert second["judge"]["cache_hit_rate"] == 1.0


def test_eval_rubric_bad_input_is_one_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _dataset(tmp_path)
    code = main(
        [
            "eval",
            "rubric",
            "-d",
            str(data),
            "-r",
            RUBRIC,
            "--model",
            "http://127.0.0.1:9/v1",
            "--column",
            "reply",
            "-o",
            str(tmp_path / "x"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 1 and "no column 'reply'" in err and "solution_str" in err
    assert "Traceback" not in err
    code = main(
        [
            "eval",
            "rubric",
            "-d",
            str(data),
            "-r",
            RUBRIC,
            "--model",
            "http://x/v1",
            "--score-min",
            "1",
            "--score-max",
            "0",
        ]
    )
    assert code == 1 and "--score-max" in capsys.readouterr().err
