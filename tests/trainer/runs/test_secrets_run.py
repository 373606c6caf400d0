"""A real (tiny-model, one-step) run with a planted key: the rollout gets the real value, and
no file the run writes holds it (snapshot, status, log, metrics, traces, checkpoints, the
MLflow store), nor does the dashboard's API."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from osmosis_ai.cli._app import main
from osmosis_ai.runs import find_run
from tests.e2e import toy_workspace

KEY = "sk-planted-run-7f3e9a1c2b"
HEADER = "import hashlib\nimport os\n"
# The rollout proves it got the real value without writing it down: a hash of it.
BEFORE_CHAT = (
    "digest = hashlib.sha256(os.environ.get('OPENAI_API_KEY', '').encode()).hexdigest()\n"
    "(ctx.artifacts_dir / 'key.sha256').write_text(digest)\n"
)


def test_a_run_writes_no_secret(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    pytest.importorskip("mlflow")
    from osmosis_trainer.models import load_model

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    ws = tmp_path / "ws"
    eos = int(load_model(str(tiny_model_dir)).tokenizer.eos_token_id)
    config = toy_workspace.make_workspace(
        ws, tiny_model_dir, eos_id=eos, rows=4, max_steps=1,
        rollout=toy_workspace.rollout_source(header=HEADER, before_chat=BEFORE_CHAT),
        extra_toml=f'\n[env]\nOPENAI_API_KEY = "{KEY}"\n\n[logging]\nreport_to = ["mlflow"]\n',
    )
    monkeypatch.chdir(ws)
    assert main(["train", "submit", str(config), "--json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["status"] == "finished"
    assert "holds secrets in the file ([env].OPENAI_API_KEY)" in out.err + out.out
    run = find_run(ws / "runs", "even")
    digests = {p.read_text() for p in run.path.glob("artifacts/**/key.sha256")}
    assert digests == {hashlib.sha256(KEY.encode()).hexdigest()}  # the worker had the value
    files = [p for p in run.path.rglob("*") if p.is_file()]
    assert any("mlruns" in p.parts for p in files)  # the tracker wrote its store here
    leaking = [str(p) for p in files if KEY.encode() in p.read_bytes()]
    assert leaking == []

    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from osmosis_ai.dashboard import create_app

    client = TestClient(create_app(ws / "runs", ws / ".osmosis" / "evals"),
                        base_url="http://127.0.0.1")
    paths = ["/", "/api/runs", f"/api/runs/{run.run_id}", f"/api/runs/{run.run_id}/metrics",
             f"/api/runs/{run.run_id}/failures", f"/api/runs/{run.run_id}/traces",
             f"/api/runs/{run.run_id}/traces/1"]
    for path in paths:
        response = client.get(path)
        assert response.status_code < 500 and KEY.encode() not in response.content, path
