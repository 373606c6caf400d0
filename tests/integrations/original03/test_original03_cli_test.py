"""``osmosis test -m <entrypoint>`` on osmosis-ai 0.3 starter-style rollouts: the entrypoint
serves a ``LocalBackend``; the command finds its workflow and grader and runs rows against a
model (here a scripted OpenAI-compatible server)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from osmosis_ai.cli._app import main
from osmosis_ai.testing import FakeOpenAIServer
from tests.integrations.original03._multiply import ROLLOUTS, SYSTEM, multiply_policy


def _rows(path: Path, pairs: list[tuple[int, int]], wrong: int = -1) -> Path:
    with open(path, "w") as fh:
        for i, (a, b) in enumerate(pairs):
            truth = a * b + (1 if i == wrong else 0)
            row = {"system_prompt": SYSTEM, "user_prompt": f"What is {a} * {b}?",
                   "ground_truth": str(truth)}
            fh.write(json.dumps(row) + "\n")
    return path


@pytest.mark.parametrize("rollout", ["multiply-local-strands", "multiply-local-openai"])
def test_test_runs_an_entrypoint_serving_a_local_backend(
    rollout: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _rows(tmp_path / "rows.jsonl", [(3, 4), (6, 7), (5, 8)], wrong=1)
    out_file = tmp_path / "out.jsonl"
    with FakeOpenAIServer(script=multiply_policy) as server:
        code = main(["test", "-m", str(ROLLOUTS / rollout), "-d", str(data), "--model",
                     server.base_url, "-o", str(out_file)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "Testing workflow" in printed
    # row 1's ground truth is off by one: graded 0, not an error
    assert "3 rows: 3 completed, 0 errored; mean reward 0.667 over 3 rewarded" in printed
    lines = [json.loads(line) for line in out_file.read_text().splitlines()]
    assert sorted(r["reward"] for r in lines) == [0.0, 1.0, 1.0]
    assert all(r["tool_calls"] == 1 and r["messages"] for r in lines)


def test_test_json_and_the_entrypoint_file_form(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _rows(tmp_path / "rows.jsonl", [(2, 9), (4, 4)])
    with FakeOpenAIServer(script=multiply_policy) as server:
        code = main(["test", "-m", str(ROLLOUTS / "multiply-local-strands" / "main.py"), "-d",
                     str(data), "--model", server.base_url, "--limit", "1", "--json"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["summary"] == {"rows": 1, "completed": 1, "errored": 0, "with_reward": 1,
                                 "mean_reward": 1.0, "stopped_by_user": False}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-m", "nowhere.py"], "nowhere.py: entrypoint file not found"),
        (["-m", "justaname"], "pass an agent loop as module:attr"),
        (["-m", "ROLLOUT", "--interactive"], "drop --interactive"),
    ],
)
def test_test_target_errors_name_the_fix(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _rows(tmp_path / "rows.jsonl", [(2, 3)])
    args = [str(ROLLOUTS / "multiply-local-strands") if a == "ROLLOUT" else a for a in args]
    code = main(["test", *args, "-d", str(data)])
    captured = capsys.readouterr()
    assert code == 1, captured
    assert message in captured.err + captured.out
    assert "Traceback" not in captured.err + captured.out



def test_a_bad_row_fails_before_the_model_is_served(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import osmosis_ai.serving as serving

    served: list[str] = []
    real = serving.create_engine

    def create_engine(model: str, **kwargs: object) -> object:
        served.append(model)  # the embedded model would spend ~20 s loading here
        return real(model, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(serving, "create_engine", create_engine)
    data = _rows(tmp_path / "rows.jsonl", [(2, 9), (4, 4)])
    with open(data, "a") as fh:
        fh.write('{"user_prompt": "What is 1 * 1?", \n')  # line 3: cut off
    with FakeOpenAIServer(script=multiply_policy) as server:
        code = main(["test", "-m", str(ROLLOUTS / "multiply-local-strands"), "-d", str(data),
                     "--model", server.base_url])
    captured = capsys.readouterr()
    assert code == 1, captured
    assert "rows.jsonl:3:" in captured.err, captured.err  # file:line
    assert "Traceback" not in captured.err + captured.out
    assert served == []  # the whole file was checked before anything started
