"""The dashboard in a real browser: Debian's Chromium (headless) driven by Playwright.

A tiny model trains 3 steps (with validation and traces) into a run store, ``osmosis
dashboard``'s app serves it on 127.0.0.1, and the page must list the run, plot its rewards
(read back from the chart library's own data) and show a traced sample's tokens. The run
page's screenshot is saved to ``$OSMOSIS_SCREENSHOT_DIR`` (default: the test's tmp folder);
the README's picture is made this way.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.core.dashboard._evals import write_eval_run

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A finished 3-step run of a tiny model under ``<tmp>/runs``; returns (root, run id)."""
    import asyncio

    from osmosis_ai.config import (
        AlgorithmConfig,
        CheckpointsConfig,
        SamplingConfig,
        TrainingSection,
    )
    from osmosis_trainer.loop import Trainer, resolve_settings
    from osmosis_trainer.loop._policy import attach_lora
    from osmosis_trainer.loop._run import create_run_dir
    from osmosis_trainer.loop._traces import TraceSampler, token_texts
    from osmosis_trainer.models import build_tiny_model, load_model
    from tests.trainer.loop.toy import ToySource, even_token_reward, toy_rows

    tmp = tmp_path_factory.mktemp("dash")
    lm = load_model(str(build_tiny_model(tmp / "model", initializer_range=0.5)))
    model = attach_lora(lm.model, r=4, alpha=8, dropout=0.0, target_modules="all-linear", seed=0)
    eos = int(lm.tokenizer.eos_token_id)
    tok = lm.tokenizer

    class Source(ToySource):
        """The toy sampler, with each sample's conversation recorded as a policy call's."""

        async def collect(self, rows: Any, *, step: int, n_samples: int | None = None) -> Any:
            out = await super().collect(rows, step=step, n_samples=n_samples)
            for s in out.samples:
                seq = s.sequences[0]
                cut = seq.loss_mask.index(1) if 1 in seq.loss_mask else len(seq.token_ids)
                s.last_call = SimpleNamespace(
                    request_messages=[{"role": "user", "content": tok.decode(seq.token_ids[:cut])}],
                    response_message={"role": "assistant",
                                      "content": tok.decode(seq.token_ids[cut:])},
                )
            return out

    source = Source(model, eos_id=eos, reward=even_token_reward(eos, min_len=2), n_samples=4)
    rows = toy_rows(tok, 6)
    settings = resolve_settings(
        n_rows=len(rows), pad_id=int(tok.pad_token_id),
        training=TrainingSection(rollout_batch_size=3, lr=2e-2, seed=0, total_epochs=3,
                                 max_steps=3),
        algorithm=AlgorithmConfig(warmup_steps=1),
        sampling=SamplingConfig(max_tokens=8),
        checkpoints=CheckpointsConfig(checkpoint_save_freq=2, eval_interval=1),
    )
    runs = tmp / "runs"
    run = create_run_dir(runs, "tiny-calc", model="tiny-qwen2", rollout="calc",
                         dataset="calc.jsonl")
    run.config_file.write_text('[experiment]\nrollout = "calc"\nmodel_path = "tiny-qwen2"\n')
    trainer = Trainer(
        model, source, rows, settings, run, tensorboard=False, eval_rows=rows[:2],
        traces=TraceSampler(run.path, 8, decode=token_texts(tok)),
    )
    # Its own thread: Playwright's sync API may already run an event loop in this one.
    with ThreadPoolExecutor(1) as pool:
        result = pool.submit(asyncio.run, trainer.train()).result()
    assert result.status == "finished" and result.steps_done == 3
    return runs, run.run_id


@pytest.fixture(scope="module")
def dashboard_url(trained_run: tuple[Path, str]) -> Iterator[str]:
    import uvicorn

    from osmosis_ai.dashboard import create_app

    runs, _ = trained_run
    app = create_app(runs, runs.parent / ".osmosis" / "evals")
    # A socket bound and listening before the server thread starts: the browser's first
    # request waits in its backlog, so nothing has to poll for readiness.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join()
        sock.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium (CI's .ci/run does)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                               args=["--no-sandbox", "--disable-gpu"])
        try:
            yield b
        finally:
            b.close()


def _metrics(runs: Path, run_id: str) -> list[dict[str, Any]]:
    lines = (runs / run_id / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_run_list_chart_and_trace_tokens(
    browser: Any, dashboard_url: str, trained_run: tuple[Path, str], tmp_path: Path
) -> None:
    runs, run_id = trained_run
    page = browser.new_page(viewport={"width": 1400, "height": 1500})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    outside: list[str] = []  # the page works offline: every request goes to the dashboard
    page.on("request", lambda req: None if req.url.startswith(dashboard_url)
            else outside.append(req.url))

    page.goto(dashboard_url + "/")
    row = page.locator(f'tr[data-run="{run_id}"]')
    row.wait_for()
    assert "finished" in row.inner_text() and "3/3" in row.inner_text()

    row.click()
    chart = page.locator('[data-chart="reward"]')
    chart.wait_for()
    records = _metrics(runs, run_id)
    train = {r["step"]: r["reward_mean"] for r in records if r["kind"] == "train"}
    val = {r["step"]: r["val_reward_mean"] for r in records if r["kind"] == "eval"}
    assert sorted(train) == [1, 2, 3] and sorted(val) == [1, 2, 3]
    # What uPlot plots: x = steps, series 1 = training reward, series 2 = validation reward.
    plotted = chart.evaluate("el => el.uplot.data")
    assert plotted[0] == [1, 2, 3]
    assert plotted[1] == pytest.approx([train[s] for s in (1, 2, 3)])
    assert plotted[2] == pytest.approx([val[s] for s in (1, 2, 3)])
    assert chart.locator("canvas").count() == 1
    assert int(chart.get_attribute("data-points") or 0) == 6
    for title in ("entropy", "KL", "importance ratio", "tokens/s", "step time (s)"):
        assert page.locator(f'[data-chart="{title}"]').count() == 1, title
    page.get_by_role("heading", name="Checkpoints").wait_for()
    shot_dir = Path(os.environ.get("OSMOSIS_SCREENSHOT_DIR") or tmp_path)
    shot_dir.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shot_dir / "dashboard-run.png"), full_page=False)

    page.locator('[data-testid="trace-steps"] a', has_text="1").first.click()
    tokens = page.locator('[data-testid="tokens"]').first
    tokens.wait_for()
    trace = [json.loads(line) for line in
             (runs / run_id / "traces" / "step_000001.jsonl").read_text().splitlines()]
    first = trace[0]["sequences"][0]
    shown = tokens.locator(".tok")
    assert shown.count() == len(first["token_ids"])
    assert tokens.locator(".tok.trained").count() == sum(first["mask"])
    assert shown.nth(0).inner_text() == first["tokens"][0].strip() or first["tokens"][0].isspace()
    sample = page.locator('[data-testid="sample"]').first
    assert f"reward {trace[0]['reward']:.3f}" in sample.inner_text()
    assert "What is" in sample.locator(".msg.user").inner_text()
    page.screenshot(path=str(shot_dir / "dashboard-trace.png"), full_page=False)
    assert errors == [] and outside == []


def test_two_eval_runs_side_by_side(
    browser: Any, dashboard_url: str, trained_run: tuple[Path, str]
) -> None:
    evals = trained_run[0].parent / ".osmosis" / "evals"
    write_eval_run(evals, "calc-base", "tiny-qwen2", [0.0, 1.0, 0.0])
    write_eval_run(evals, "calc-trained", trained_run[1] + ":3", [1.0, 1.0, 0.0])
    page = browser.new_page()
    page.goto(dashboard_url + "/#/evals")
    page.get_by_label("select calc-base").check()
    page.get_by_label("select calc-trained").check()
    page.get_by_role("button", name="compare the two selected").click()
    table = page.locator('[data-testid="compare"]')
    table.wait_for()
    rows = table.locator("tbody tr")
    assert rows.count() == 3
    assert rows.nth(0).inner_text().split() == ["0", "0", "1", "1"]  # row, A, B, B - A
    assert "B better on 1, A better on 0" in page.locator("main").inner_text()


def test_deleted_run_says_so(browser: Any, dashboard_url: str) -> None:
    page = browser.new_page()
    page.goto(dashboard_url + "/#/run/no-such-run-20260101-000000")
    message = page.locator('[data-testid="error"]')
    message.wait_for()
    assert "deleted?" in message.inner_text()



def test_tool_calls_overview_checkpoints_and_outputs(
    browser: Any, dashboard_url: str, trained_run: tuple[Path, str], tmp_path: Path
) -> None:
    """A run folder written as a tool-using run leaves it (fixtures of the API tests): the
    trace shows the call as a block with its result's masked tokens, the overview lists
    Improvement and Samples, the checkpoint its Hub upload, Outputs the rollout's file."""
    from tests.core.dashboard.test_run_views import SAMPLE

    runs, _ = trained_run
    run = runs / "tools-20260101-000000"
    (run / "traces").mkdir(parents=True)
    (run / "status.json").write_text(json.dumps({
        "name": "tools", "run_id": run.name, "status": "finished", "phase": "complete",
        "step": 4, "total_steps": 4, "created_at": 1.0, "finished_at": 61.0}))
    (run / "traces" / "step_000001.jsonl").write_text(json.dumps(SAMPLE) + "\n")
    records = [{"step": s, "kind": "train", "reward_mean": 0.2 * s, "samples": 8.0,
                "tools/call_rate": 0.25 * s, "tools/calls_per_rollout": 0.5 * s,
                "tools/turns_per_rollout": 1 + 0.5 * s} for s in (1, 2, 3, 4)]
    records += [{"step": s, "kind": "warm_start", "warm_start/loss": 1.0 / s,
                 "warm_start/token_accuracy": 0.2 * s} for s in (1, 2)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    ckpt = run / "checkpoints" / "step_000004"
    (ckpt / "adapter").mkdir(parents=True)
    (ckpt / "trainer_state.pt").write_bytes(b"x")
    from osmosis_ai.runs._published import record_upload

    record_upload(ckpt, repo="me/tools", url="https://huggingface.co/me/tools", private=True,
                  merged=False)
    art = run / "artifacts" / "r0" / "artifacts"
    art.mkdir(parents=True)
    (art / "notes.txt").write_text("<b>not markup</b>")

    page = browser.new_page(viewport={"width": 1400, "height": 1500})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text)
            if "Content Security Policy" in msg.text else None)
    page.goto(f"{dashboard_url}/#/run/{run.name}")
    overview = page.locator('[data-testid="overview"]')
    overview.wait_for()
    assert overview.locator('[data-key="samples"]').inner_text() == "32"
    assert overview.locator('[data-key="improvement"]').inner_text().startswith("+0.400")
    for title in ("tool-call rate", "tool use per rollout", "warm-start loss",
                  "warm-start token accuracy"):
        assert page.locator(f'[data-chart="{title}"] canvas').count() == 1, title
    rate = page.locator('[data-chart="tool-call rate"]').evaluate("el => el.uplot.data")
    assert rate[1] == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert "me/tools (private" in page.locator('[data-testid="hub"]').first.inner_text()
    assert page.locator('[data-testid="deployment"]').first.inner_text() == "not deployed"
    page.locator('[data-testid="outputs"] a', has_text="notes.txt").click()
    shown = page.locator('[data-testid="output"]')
    shown.wait_for()
    assert shown.inner_text() == "<b>not markup</b>"  # text, never markup

    page.goto(f"{dashboard_url}/#/run/{run.name}/traces/1")
    call = page.locator('[data-testid="tool-call"]')
    call.wait_for()
    assert call.locator('[data-testid="tool-name"]').inner_text() == "divide"
    assert json.loads(call.locator('[data-testid="tool-args"]').inner_text()) == {"a": 18, "b": 3}
    result = call.locator('[data-testid="tool-result"]').inner_text()
    assert "1 masked" in result and "6" in result
    user = page.locator(".msg.user").first.inner_text()
    assert "What is 18 / 3?" in user and "[{" not in user  # content parts as text
    assert page.locator(".tok.toolres").count() == 1
    page.screenshot(path=str(tmp_path / "dashboard-tools.png"), full_page=False)
    assert errors == []
