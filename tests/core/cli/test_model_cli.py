"""``osmosis model list|export|deploy`` and ``osmosis eval run --model RUN:STEP --baseline``
on a tiny model (built offline) with a real PEFT adapter written as a run's checkpoint."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.core.eval._helpers import make_run

from .conftest import RunCli

RUN_ID = "calc-20261124-010000"
TOOLS = [{"type": "function", "function": {"name": "add", "description": "Add two integers.",
                                           "parameters": {"type": "object", "properties": {}}}}]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from osmosis_trainer.models import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", initializer_range=0.5)


def _adapter_writer(base: Path, seed: int):  # type: ignore[no-untyped-def]
    def write(folder: Path) -> None:
        import torch
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM

        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_pretrained(str(base))
        lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])
        peft_model = get_peft_model(model, lora)
        with torch.no_grad():
            for name, p in peft_model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0.0, 0.5)  # a non-zero update, so merged != base
        peft_model.save_pretrained(str(folder))

    return write


@pytest.fixture
def workspace(
    run_cli: RunCli, tmp_path: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> Path:
    assert run_cli("template", "create", "calc", "--dir", tmp_path).code == 0
    make_run(
        tmp_path,
        RUN_ID,
        steps=(1, 2),
        rewards=(0.2, 0.6),
        base_model=str(tiny_model),
        adapter_files=_adapter_writer(tiny_model, seed=1),
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OSMOSIS_RUNS_DIR", raising=False)
    return tmp_path


def test_list_shows_every_checkpoint(run_cli: RunCli, workspace: Path, tiny_model: Path) -> None:
    res = run_cli("model", "list")
    assert res.code == 0, res.err
    assert f"{RUN_ID}:1" in res.out and f"{RUN_ID}:2" in res.out
    assert "0.600" in res.out and "osmosis model deploy RUN:STEP" in res.out
    rows = run_cli("model", "list", "--json").json()
    assert [(r["run"], r["step"], r["reward"]) for r in rows] == [
        (RUN_ID, 1, 0.2),
        (RUN_ID, 2, 0.6),
    ]
    assert rows[0]["base_model"] == str(tiny_model)
    assert rows[1]["adapter"].endswith("checkpoints/step_000002/adapter")


def test_list_of_an_empty_workspace(run_cli: RunCli, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    res = run_cli("model", "list")
    assert res.code == 0 and "No checkpoints under" in res.out
    assert "saved every [checkpoints] checkpoint_save_freq steps" in res.out  # not markup


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("model", "export", "nope", "out"), "no run named 'nope'"),
        (("model", "export", f"{RUN_ID}:7", "out"), "no checkpoint at step 7; its checkpoints"),
        (("model", "deploy", "calc", "--engine", "tgi"), "--engine 'tgi': use auto, vllm or hf"),
        (("model", "export", "calc", "out", "--push-to-hub", "x"), "use a Hub repo id"),
    ],
)
def test_bad_input_is_one_line(
    run_cli: RunCli, workspace: Path, args: tuple[str, ...], message: str
) -> None:
    res = run_cli(*args)
    assert res.code == 1
    assert message in res.err and "Traceback" not in res.err
    assert len(res.err.strip().splitlines()) == 1


def _logits(model, text: str = "What is 2 + 3?"):  # type: ignore[no-untyped-def]
    import torch

    ids = torch.tensor([[3 + b for b in text.encode()][:20]]) % model.config.vocab_size
    with torch.no_grad():
        return model(ids).logits


def test_export_adapter_and_merged_model(
    run_cli: RunCli, workspace: Path, tiny_model: Path
) -> None:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    res = run_cli("model", "export", "calc:best", "adapter_out")
    assert res.code == 0, res.err
    assert f"exported {RUN_ID}:2 as a PEFT adapter" in res.out
    cfg = json.loads((workspace / "adapter_out/adapter_config.json").read_text())
    assert cfg["base_model_name_or_path"] == str(tiny_model)
    assert "step 2" in (workspace / "adapter_out/README.md").read_text()
    with_adapter = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(str(tiny_model)), str(workspace / "adapter_out")
    )

    res = run_cli("model", "export", "calc:best", "merged_out", "--merge")
    assert res.code == 0, res.err
    assert "merged model (loads without peft)" in res.out
    merged = AutoModelForCausalLM.from_pretrained(str(workspace / "merged_out"))
    assert not any("lora" in n for n, _ in merged.named_parameters())
    base = AutoModelForCausalLM.from_pretrained(str(tiny_model))
    assert torch.allclose(_logits(merged), _logits(with_adapter), atol=1e-4)
    assert not torch.allclose(_logits(merged), _logits(base), atol=1e-3)

    res = run_cli("model", "export", "calc", "merged_out")
    assert res.code == 1 and "exists and is not empty" in res.err


def test_push_to_hub_offline_is_a_clear_error(
    run_cli: RunCli, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    res = run_cli("model", "export", "calc", "out", "--push-to-hub", "me/calc-lora")
    assert res.code == 1
    assert "this machine is offline (HF_HUB_OFFLINE is set)" in res.err
    assert "huggingface-cli upload me/calc-lora" in res.err
    assert (workspace / "out/adapter_config.json").is_file()  # the export itself is kept


def test_deploy_serves_the_checkpoint_openai_style(workspace: Path, tiny_model: Path) -> None:
    # The key from the environment: never on the command line (ps shows it to every user).
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OSMOSIS_DEPLOY_API_KEY": "cli-k3y"}
    cmd = [
        sys.executable,
        "-c",
        "import sys; from osmosis_ai.cli import main; sys.exit(main())",
        "model",
        "deploy",
        "calc:2",
        "--port",
        "0",
        "--engine",
        "hf",
        "--device",
        "cpu",
        "--max-body-bytes",
        "2048",
    ]
    auth = {"Authorization": "Bearer cli-k3y"}
    proc = subprocess.Popen(
        cmd, cwd=workspace, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # blocks until the server says where it is (or exits)
        m = re.match(r"Serving (\S+) at (http://127\.0\.0\.1:\d+/v1) as model '([^']+)'", line)
        assert m, (line, proc.stderr.read() if proc.stderr and proc.poll() is not None else "")
        assert m.group(1) == f"{RUN_ID}:2" and m.group(3) == "calc-step2"
        url, name = m.group(2), m.group(3)
        assert httpx.get(f"{url}/models").status_code == 401  # $OSMOSIS_DEPLOY_API_KEY
        models = httpx.get(f"{url}/models", headers=auth).json()
        assert name in [x["id"] for x in models["data"]]
        messages = [{"role": "user", "content": "Hi"}]
        body = {"model": name, "messages": messages, "tools": TOOLS, "max_tokens": 5,
                "return_token_ids": True}
        assert httpx.post(f"{url}/chat/completions", json=body, timeout=60).status_code == 401
        reply = httpx.post(f"{url}/chat/completions", json=body, timeout=60, headers=auth).json()
        assert reply["object"] == "chat.completion"
        assert reply["model"] == name
        assert reply["usage"]["completion_tokens"] >= 1
        # The deployed prompt is the one training and eval render (one renderer for all).
        from osmosis_trainer.engines import ChatRenderer
        from osmosis_trainer.models import load_model

        tokenizer = load_model(str(tiny_model)).tokenizer
        assert reply["prompt_token_ids"] == ChatRenderer(tokenizer).encode(messages, TOOLS)
        big = httpx.post(
            f"{url}/chat/completions",
            json={"model": name, "messages": [{"role": "user", "content": "x" * 3000}]},
            timeout=60, headers=auth,
        )
        assert big.status_code == 413  # --max-body-bytes 2048
        assert big.json()["error"] == {
            "message": "request body is larger than 2048 bytes",
            "type": "invalid_request_error",
            "param": None,
            "code": "request_too_large",
        }
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert "cli-k3y" not in line + out + err  # the key is never printed


def test_deploy_refuses_a_tiny_body_limit(run_cli: RunCli, workspace: Path) -> None:
    res = run_cli("model", "deploy", "calc:2", "--max-body-bytes", "100")
    assert res.code == 1
    assert "--max-body-bytes 100: Input should be greater than or equal to 1024" in res.err


def test_eval_checkpoint_against_its_base_with_a_confidence_interval(
    run_cli: RunCli, workspace: Path
) -> None:
    res = run_cli(
        "eval",
        "run",
        "configs/eval/calc.toml",
        "--model",
        "calc:2",
        "--baseline",
        "--limit",
        "3",
        "--name",
        "ckpt",
    )
    assert res.code == 0, res.err
    assert f"eval calc: 3 samples, model {RUN_ID}:2" in res.out
    assert re.search(r"compared on \d+ rows \(same rows, n=1\)", res.out) or (
        "compared on 0 rows" in res.out
    )
    assert "95% CI [" in res.out and "paired bootstrap over rows" in res.out
    run_dir = workspace / ".osmosis/evals/ckpt"
    info = json.loads((run_dir / "run.json").read_text())
    assert info["checkpoint"]["step"] == 2 and info["baseline"] == info["engine_model"]
    base_info = json.loads((run_dir / "baseline/run.json").read_text())
    assert base_info["model"] == info["engine_model"] and base_info["checkpoint"] is None
    cmp = json.loads((run_dir / "comparison.json").read_text())
    assert cmp["candidate"] == f"{RUN_ID}:2" and cmp["rows"] + cmp["unpaired_rows"] == 3

    data = run_cli(
        "eval",
        "run",
        "configs/eval/calc.toml",
        "--model",
        "calc:2",
        "--baseline",
        "--name",
        "ckpt",
        "--json",
    ).json()
    assert data["comparison"]["candidate"] == f"{RUN_ID}:2"
    assert data["summary"]["samples"] == 3 and data["baseline_summary"]["samples"] == 3

    shown = run_cli("eval", "info", "ckpt")
    assert shown.code == 0, shown.err
    assert f"vs baseline {info['engine_model']}: reward" in shown.out and "% CI [" in shown.out
    listed = run_cli("eval", "list", "--json").json()
    assert [(v["name"], v["status"], v["baseline"]) for v in listed] == [
        ("ckpt", "completed", info["engine_model"])
    ]


def test_baseline_without_a_checkpoint_is_one_line(run_cli: RunCli, workspace: Path) -> None:
    res = run_cli("eval", "run", "configs/eval/calc.toml", "--baseline", "--model", "embedded")
    assert res.code == 1 and "--baseline compares a trained checkpoint" in res.err


@pytest.mark.slow  # a real (two-step) training run of the tiny model
def test_train_then_list_then_eval_the_checkpoint_against_its_base(
    run_cli: RunCli, tmp_path: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run_cli("template", "create", "calc", "--dir", tmp_path).code == 0
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OSMOSIS_RUNS_DIR", raising=False)
    cfg = tmp_path / "configs/training/calc.toml"
    text = cfg.read_text().replace('model_path = "embedded"', f'model_path = "{tiny_model}"')
    for key, value in (
        ("max_steps", 2),
        ("rollout_batch_size", 2),
        ("n_samples_per_prompt", 2),
        ("checkpoint_save_freq", 1),
    ):
        text = re.sub(rf"(?m)^{key} = .*$", f"{key} = {value}", text)
    cfg.write_text(text)
    res = run_cli("train", "submit", cfg)
    assert res.code == 0, res.err

    rows = run_cli("model", "list", "--json").json()
    assert [r["step"] for r in rows] == [1, 2]
    run_id = rows[-1]["run"]
    assert rows[-1]["base_model"] == str(tiny_model)

    data = run_cli(
        "eval",
        "run",
        "configs/eval/calc.toml",
        "--model",
        "calc",
        "--baseline",
        "--limit",
        "4",
        "--json",
    ).json()
    assert data["model"] == f"{run_id}:2" and data["baseline"] == str(tiny_model)
    cmp = data["comparison"]
    assert cmp["rows"] + cmp["unpaired_rows"] == 4
    if cmp["rows"]:
        assert cmp["ci_low"] <= cmp["diff"] <= cmp["ci_high"]
