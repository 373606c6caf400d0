"""The ``support-judge`` template: scaffolded, its configs load, and an eval scores every reply
with the judge (scripted policy and scripted judge, each the real gateway in front of a
ScriptedEngine); an unreadable judge fails the sample with its raw reply instead of scoring 0."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from osmosis_ai.config import load_eval_config, load_training_config
from osmosis_ai.eval import EvalOptions, EvalResult, run_eval
from osmosis_ai.rollout.running import load_entrypoint
from osmosis_ai.serving.gateway import PolicyGateway
from osmosis_ai.templates import create_from_template
from osmosis_ai.testing import FakeRequest, ScriptedEngine
from tests.core.grading._helpers import ScriptedJudge, graded_response, scripted_judge


def _policy(req: FakeRequest) -> str:
    question = str(req.messages[-1]["content"])
    if "password" in question:
        return "Tap 'Forgot password' on the sign-in screen."
    return "Please read the manual."


def _level_judge(req: FakeRequest) -> str:
    response = graded_response(req)
    return "5 - names the button." if "Tap" in response else "2 - no concrete step."


@contextlib.asynccontextmanager
async def _policy_endpoint(model: str, sampling: dict[str, Any], **_: Any) -> AsyncIterator[Any]:
    async with PolicyGateway(ScriptedEngine(per_sample=False, script=_policy)) as gw:
        yield gw


def test_scaffold_and_configs(tmp_path: Path) -> None:
    create_from_template("support-judge", "support", tmp_path)
    main = tmp_path / "rollouts/support/main.py"
    assert "{{" not in main.read_text()
    entry = load_entrypoint(main)
    assert entry.grader_cls is not None and entry.grader_cls.__name__ == "SupportGrader"
    assert (
        load_eval_config(tmp_path / "configs/eval/support.toml").evaluation.pass_threshold == 0.75
    )
    training = load_training_config(tmp_path / "configs/training/support.toml")
    assert training.experiment.model_path == "embedded"
    rows = (tmp_path / "data/support.jsonl").read_text().splitlines()
    assert len(rows) >= 20 and all(json.loads(r)["user_prompt"] for r in rows)


@contextlib.asynccontextmanager
async def _support_eval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, judge: Any, limit: int
) -> AsyncIterator[tuple[EvalResult, ScriptedJudge]]:
    """The support-judge template evaluated on ``limit`` rows by the scripted policy, its
    grader's judge answering from ``judge`` (offline: no OpenAI key)."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    create_from_template("support-judge", "support", tmp_path)
    async with scripted_judge(judge) as sj:
        monkeypatch.setenv("OSMOSIS_JUDGE_MODEL", sj.model.model)
        result = await run_eval(
            tmp_path / "configs/eval/support.toml",
            EvalOptions(limit=limit, output=tmp_path / "out"),
            endpoint_factory=_policy_endpoint,
        )
        yield result, sj


async def test_eval_scores_replies_with_the_judge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with _support_eval(tmp_path, monkeypatch, _level_judge, 4) as (result, sj):
        s = result.summary
        assert s.success == 4, s.failure_examples
        rewards = sorted(r.reward or 0.0 for r in result.records)
        assert rewards == [0.25, 0.25, 0.25, 1.0]  # levels 2/5 and 5/5 on a 0..1 scale
        # Three sampled judge calls per reply (levels mode, n=3), recorded on the sample.
        assert len(sj.requests) == 12
        assert {r.temperature for r in sj.requests} == {1.0}
        trace = json.loads((tmp_path / "out" / str(result.records[0].trace)).read_text())
        assert trace["metrics"]["judge_calls"] == 3.0


async def test_an_unreadable_judge_fails_the_sample_with_its_reply(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    unsure = lambda _req: "I am not sure what you mean."  # noqa: E731
    async with _support_eval(tmp_path, monkeypatch, unsure, 2) as (result, _sj):
        pass
    s = result.summary
    assert s.failed == 2 and s.success == 0 and s.reward.count == 0
    assert s.failures_by_reason == {"grader_error": 2}
    assert re.search(
        r"no level from 1 to 5.*I am not sure what you mean", s.failure_examples["grader_error"]
    )


async def test_judge_usage_reaches_the_eval_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with _support_eval(tmp_path, monkeypatch, _level_judge, 2) as (result, _sj):
        pass
    assert all(r.judge["calls"] == 3.0 for r in result.records)
    judge = result.summary.judge
    assert judge["calls"] == 6.0 and judge["prompt_tokens"] > 0 and judge["cache_hits"] == 0.0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["judge"]["calls"] == 6.0
