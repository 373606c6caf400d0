"""The training worker's OpenMP defaults: a bounded spin, and the user's own setting wins."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from osmosis_trainer._openmp import OPENMP_DEFAULTS, apply_openmp_defaults


def test_sets_a_bounded_active_spin_when_unset() -> None:
    env: dict[str, str] = {"PATH": "/bin"}
    assert apply_openmp_defaults(env) == OPENMP_DEFAULTS
    assert env["OMP_WAIT_POLICY"] == "ACTIVE"
    # ACTIVE alone spins for minutes; the count is what bounds it.
    assert 0 < int(env["GOMP_SPINCOUNT"]) <= 1_000_000


@pytest.mark.parametrize(
    "user", [{"OMP_WAIT_POLICY": "PASSIVE"}, {"GOMP_SPINCOUNT": "0"}, {"OMP_WAIT_POLICY": ""}]
)
def test_the_users_own_setting_wins(user: dict[str, str]) -> None:
    env = dict(user)
    assert apply_openmp_defaults(env) == {}
    assert env == user


def test_the_worker_sets_it_before_torch_loads() -> None:
    # libgomp reads the variables once, when torch loads it: the worker module must not
    # import torch before its main() applies the defaults.
    code = "import sys, osmosis_trainer.worker; print('torch' in sys.modules)"
    env = {k: v for k, v in os.environ.items() if k not in OPENMP_DEFAULTS}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True,
        cwd=Path(__file__).parent,
    )
    assert out.stdout.strip() == "False"


def test_releasing_the_team_ends_its_workers() -> None:
    """``release_thread_team`` ends the OpenMP workers the calling thread opened (a later
    kernel opens them again). In a child process: the test runner's threads stay apart."""
    code = """
import os, time, torch
from osmosis_trainer._openmp import release_thread_team
torch.set_num_threads(2)
def threads():
    return len(os.listdir('/proc/self/task'))
before = threads()
torch.ones(2048, 2048).mul(2).sum()  # a parallel kernel: the team opens
opened = threads()
released = release_thread_team()
for _ in range(200):  # its workers exit asynchronously
    if threads() < opened:
        break
    time.sleep(0.05)
print(opened > before, released, threads() < opened)
"""
    if not sys.platform.startswith("linux"):
        pytest.skip("reads /proc/self/task")
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        cwd=Path(__file__).parent,
    )
    assert out.stdout.split() == ["True", "True", "True"]


def test_the_job_runs_updates_on_a_cpu_engines_thread(tiny_loaded: object) -> None:
    from osmosis_trainer.engines import HFEngine
    from osmosis_trainer.job._engines import torch_executor

    engine = HFEngine(tiny_loaded, device="cpu")  # type: ignore[arg-type]
    assert torch_executor(engine) is not None
    assert torch_executor(object()) is None  # type: ignore[arg-type]  # a vLLM or remote engine
