"""The README's migration claim: an existing rollout changes in at most two lines, then trains.

``migration/<framework>_before.py`` is a rollout on a hosted model; ``<framework>_after.py`` is
the same file after the migration. The test counts the changed lines and runs the "after" file
through the runner on the fake policy server, recording trainable samples.
"""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from osmosis_ai.rollout.running import load_entrypoint
from osmosis_ai.testing import FakeOpenAIServer
from tests.integrations._calc import calculator, rows
from tests.integrations._helpers import run_rollouts

HERE = Path(__file__).parent / "migration"


def changed_lines(before: str, after: str) -> int:
    matcher = difflib.SequenceMatcher(a=before.splitlines(), b=after.splitlines(), autojunk=False)
    return sum(
        max(i2 - i1, j2 - j1) for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"
    )


@pytest.mark.parametrize(
    ("framework", "sample_id"), [("strands", "main"), ("agents", "calculator")]
)
async def test_migration_is_two_lines_and_the_result_trains(framework: str, sample_id: str) -> None:
    before, after = HERE / f"{framework}_before.py", HERE / f"{framework}_after.py"
    assert changed_lines(before.read_text(), after.read_text()) == 2
    load_entrypoint(before)  # the original is a valid rollout too (it would call a hosted API)
    additions = [r for r in rows(6) if "+" in r.user_prompt]  # the example has an add tool only
    async with FakeOpenAIServer(script=calculator) as server:
        outcomes, _ = await run_rollouts(after, server, additions)
    for outcome in outcomes:
        sample = outcome.sample(sample_id)
        assert sample is not None and sample.reward == 1.0
        assert len(sample.calls) == 2 and all(c.trainable for c in sample.calls)
