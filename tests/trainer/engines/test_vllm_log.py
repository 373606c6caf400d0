"""vLLM's log is the run's or the deployment's own file, mode 0600, never opened through a
link nor at a predictable name in a shared ``/tmp`` (issue 41 §4)."""

from __future__ import annotations

import argparse
import json
import os
import stat
from pathlib import Path

import pytest

from osmosis_trainer.deploy import deploy_log, vllm_options
from osmosis_trainer.engines._vllm import VLLMEngine, open_private_log


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_log_is_private_and_never_follows_a_link(tmp_path: Path) -> None:
    victim = tmp_path / "bashrc"
    victim.write_text("keep me\n")
    planted = tmp_path / "vllm.log"
    planted.symlink_to(victim)
    with pytest.raises(OSError):
        VLLMEngine._spawn(["true"], dict(os.environ), planted)
    assert victim.read_text() == "keep me\n"

    wide = tmp_path / "old.log"
    wide.write_text("old")
    wide.chmod(0o644)
    with open_private_log(wide) as fh:
        fh.write(b"new")
    assert _mode(wide) == 0o600 and wide.read_bytes() == b"new"
    fresh = tmp_path / "fresh.log"
    VLLMEngine._spawn(["true"], dict(os.environ), fresh).wait()
    assert _mode(fresh) == 0o600


def test_a_deployed_servers_log_goes_into_the_run(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "calc-20261124-010000"
    adapter = run / "checkpoints" / "step_000002" / "adapter"
    adapter.mkdir(parents=True)
    (run / "status.json").write_text("{}")
    (adapter / "adapter_config.json").write_text(json.dumps({"r": 8}))
    log = deploy_log(adapter)
    assert log.parent == (run / "deploy").resolve() and _mode(log.parent) == 0o700
    args = argparse.Namespace(adapter=adapter)
    assert vllm_options(args, "/models/base", cuda=False)["log_file"].parent == log.parent
    elsewhere = deploy_log(tmp_path / "loose" / "adapter")
    assert elsewhere.parent != Path("/tmp") and _mode(elsewhere.parent) == 0o700
