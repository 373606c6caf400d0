"""How the trainer's OpenMP threads wait between kernels: a bounded spin.

torch's CPU kernels run on OpenMP (libgomp in the PyPI wheels). Between two parallel regions
an idle worker thread either spins or sleeps on a futex, and waking a sleeping one costs tens of
microseconds on a virtual machine (an inter-processor interrupt through the hypervisor), more on
some hosts than on others. A training step runs tens of thousands of small kernels (32-row
decode matmuls, rank-8 LoRA products), so that cost can decide how fast the step is. It
varies by host: ``trainer_real``'s ``openmp`` row measures this setting against libgomp's
defaults on the CPU at hand (BENCHMARKS.md).

libgomp's own ``ACTIVE`` spins for minutes, which burns both cores while the trainer waits on
HTTP (a remote rollout server, a judge); its default spins ~3 ms but drops to 100 spins as soon
as the process holds more OpenMP threads than CPUs. ``ACTIVE`` with ``GOMP_SPINCOUNT`` spins at most
that many times (~1 ms) and then sleeps; over-subscribed, libgomp caps it at 1000 spins.

Over-subscribed means more OpenMP threads than CPUs: each thread that runs torch keeps a team
(itself and CPUs - 1 workers), so two such threads already count 3 on 2 CPUs. The training job
therefore runs its updates on the CPU engine's decoding thread (``HFEngine.executor``) and,
before training, releases the team the main thread opened while loading the model
(:func:`release_thread_team`): one team, whose workers spin between kernels.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import MutableMapping

__all__ = ["OPENMP_DEFAULTS", "apply_openmp_defaults", "release_thread_team"]

OPENMP_DEFAULTS = {"OMP_WAIT_POLICY": "ACTIVE", "GOMP_SPINCOUNT": "100000"}
"""The environment the training worker gives libgomp unless the user set either variable."""


def apply_openmp_defaults(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Set :data:`OPENMP_DEFAULTS` in ``environ`` (``os.environ``) and return what was set.

    Call it before torch is first imported: libgomp reads the variables once, when it loads.
    A user's own ``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT`` wins, and then neither is touched
    (``OMP_WAIT_POLICY=PASSIVE`` for a CPU shared with other busy work).
    """
    env = os.environ if environ is None else environ
    if any(key in env for key in OPENMP_DEFAULTS):
        return {}
    env.update(OPENMP_DEFAULTS)
    return dict(OPENMP_DEFAULTS)


_OMP_PAUSE_SOFT = 1
"""``omp_pause_soft`` of OpenMP 5.0's ``omp_pause_resource_t``."""


def release_thread_team() -> bool:
    """End the OpenMP team of the calling thread (its workers exit); True when it did.

    OpenMP 5.0's ``omp_pause_resource_all``, looked up in the libraries the process already
    has (torch loaded libgomp): a later kernel on this thread opens a new team, so it is safe
    to call at any time outside a parallel region. Off Linux, or where the OpenMP runtime
    lacks it, nothing happens.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        pause = ctypes.CDLL(None).omp_pause_resource_all
    except (OSError, AttributeError):
        return False
    pause.argtypes = [ctypes.c_int]
    pause.restype = ctypes.c_int
    status: int = pause(_OMP_PAUSE_SOFT)
    return status == 0
