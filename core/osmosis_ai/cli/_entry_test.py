"""``osmosis test -m main.py -d rows.jsonl``: try an entrypoint rollout (an ``AgentWorkflow``
and its ``Grader``, or a ``LocalBackend`` the entrypoint serves, as osmosis-ai 0.3 writes it)
on a few rows, the way ``osmosis test`` tries a remote agent loop.

The rows run in-process through the same runner as ``osmosis eval run`` and training (one
sample each, no eval run folder written); the workflow owns its loop, so ``--max-turns`` and
``--max-tokens-total`` do not apply.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rich.markup import escape

from osmosis_ai.console import state
from osmosis_ai.errors import ConfigError

__all__ = ["EntrypointTest", "entrypoint_target"]


def entrypoint_target(spec: str) -> Path | None:
    """The entrypoint file ``spec`` names (``main.py``, ``rollouts/calc/main.py`` or a rollout
    folder holding ``main.py``), or ``None`` when ``spec`` is an agent loop's ``module:attr``."""
    if ":" in spec and not Path(spec).exists():
        return None
    path = Path(spec)
    if path.is_dir():
        main = path / "main.py"
        if not main.is_file():
            raise ConfigError(
                f"{spec}: a rollout folder needs a main.py; pass the entrypoint file itself "
                "(-m rollouts/NAME/FILE.py) or an agent loop as module:attr"
            )
        return main
    if path.suffix == ".py":
        if not path.is_file():
            raise ConfigError(f"{spec}: entrypoint file not found")
        return path
    if Path(f"{spec}.py").is_file():
        return Path(f"{spec}.py")
    raise ConfigError(
        f"-m {spec!r}: pass an agent loop as module:attr (e.g. server:agent_loop), or an "
        "entrypoint file or rollout folder (e.g. main.py, rollouts/calc)"
    )


class EntrypointTest:
    """Runs rows through an entrypoint's workflow and grader against one model and reports them.

    Args:
        entrypoint: the entrypoint file.
        model: what serves the policy (``embedded``, a folder, a URL, a LiteLLM id).
        sampling: chat parameters (``temperature``, ``max_tokens``) for every call.
        concurrency: rows in flight at once.
        json_out: print nothing per row (the caller emits the returned dict as JSON).
        output: a JSONL file that gets each row's record and its messages.
    """

    def __init__(self, entrypoint: Path, *, model: str, sampling: dict[str, Any],
                 concurrency: int, json_out: bool, output: Path | None) -> None:
        from osmosis_ai.rollout.running import load_entrypoint

        self.entry = load_entrypoint(entrypoint)  # DiscoveryError names the file and the fix
        self.model = model
        self.sampling = sampling
        self.concurrency = concurrency
        self.json_out = json_out
        self.output = output
        self.results: list[dict[str, Any]] = []

    async def run(self, rows: Iterable[Any]) -> dict[str, Any]:
        from osmosis_ai.eval._endpoint import open_policy_endpoint
        from osmosis_ai.eval._traces import outcome_records
        from osmosis_ai.rollout.running import RolloutRunner

        name = self.entry.workflow_cls.__name__
        if not self.json_out:
            state.console.print(
                f"Testing workflow {escape(name)} ({escape(str(self.entry.path))}) against "
                f"{escape(self.model)}"
            )
        async with open_policy_endpoint(self.model, self.sampling) as endpoint:
            runner = RolloutRunner(self.entry, endpoint, n_samples=1,
                                   concurrency=self.concurrency, sampling=self.sampling)
            async with runner:
                async for outcome in runner.run(rows):
                    for record, sample in outcome_records(outcome, pass_threshold=1.0):
                        messages = list(sample.messages) if sample is not None else []
                        self._record(record.model_dump(mode="json"), messages)
        return self._finish()

    def _record(self, record: dict[str, Any], messages: list[Any]) -> None:
        self.results.append(record)
        if self.output is not None:
            self.output.parent.mkdir(parents=True, exist_ok=True)
            with self.output.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps({**record, "messages": messages}, ensure_ascii=False,
                                    default=str) + "\n")
        if self.json_out:
            return
        reward = "-" if record["reward"] is None else f"{record['reward']:.3g}"
        color = "green" if record["status"] == "success" else "red"
        state.console.print(
            f"row {record['row_index']:>3}  [{color}]{record['status']:<9}[/]  reward {reward:<6} "
            f"{record['num_calls']} LLM calls, {record['tool_calls']} tool calls, "
            f"{record['duration_ms']:.0f} ms",
            soft_wrap=True,
        )
        if record["error"]:
            state.console.print(f"         [red]{escape(str(record['error']))}[/]", soft_wrap=True)

    def _finish(self) -> dict[str, Any]:
        self.results.sort(key=lambda r: r["row_index"])
        from osmosis_ai.cli._remote_test import summarize_test_run

        summary = summarize_test_run(
            rows=len({r["row_index"] for r in self.results}),
            completed=sum(r["status"] == "success" for r in self.results),
            errored=sum(r["status"] == "failed" for r in self.results),
            rewards=[r["reward"] for r in self.results if r["reward"] is not None],
            stopped=False, quiet=self.json_out,
        )
        return {"summary": summary, "results": self.results}
