"""The gateway an eval starts takes its request-body limit from the config's ``[gateway]``.

``run_eval`` runs its real default endpoint (policy gateway in front of an OpenAI-compatible
engine), here pointed at a scripted server, so the only thing between the rollout and the
model is the gateway whose limit is under test.
"""

from __future__ import annotations

import json
from pathlib import Path

from osmosis_ai.eval import EvalOptions, run_eval
from osmosis_ai.templates import create_from_template
from osmosis_ai.testing import FakeOpenAIServer


async def _eval(ws: Path, model_url: str, dataset: Path) -> list[tuple[str, str | None]]:
    result = await run_eval(
        ws / "configs/eval/calc.toml",
        EvalOptions(model=model_url, dataset_file=dataset, output=ws / "out", resume=False),
    )
    return [(r.status, r.error) for r in result.records]


async def test_a_config_body_limit_reaches_the_eval_gateway(tmp_path: Path) -> None:
    create_from_template("single-call", "calc", tmp_path)
    dataset = tmp_path / "long.jsonl"
    row = {"user_prompt": "What is 2 + 2? " + "Think it over. " * 150, "ground_truth": "4"}
    dataset.write_text(json.dumps(row) + "\n")
    config = tmp_path / "configs/eval/calc.toml"
    async with FakeOpenAIServer(script=lambda _req: "4") as server:
        model = f"{server.url}/v1"
        [(status, error)] = await _eval(tmp_path, model, dataset)  # default limit: 32 MiB
        assert (status, error) == ("success", None)
        config.write_text(config.read_text() + "\n[gateway]\nmax_body_bytes = 1024\n")
        (tmp_path / "out").rename(tmp_path / "out-default")
        [(status, error)] = await _eval(tmp_path, model, dataset)
    assert status != "success"
    assert error is not None and "413" in error and "larger than 1024 bytes" in error
