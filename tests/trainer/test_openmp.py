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
