"""A real two-node Ray cluster on 127.0.0.1: ``ray start --head`` plus ``ray start --address``.

The nodes are separate raylets with different resources (the head advertises ``{"head": 1}``,
the second node ``{"side": 1}``), in a temp dir, on fixed ports (``OSMOSIS_RAY_PORT``, default
6391) with a small object store. Every command is bounded; ``ray stop`` always runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["local_cluster"]

_STORE = str(100 * 1024 * 1024)


def _ray() -> str:
    exe = Path(sys.executable).with_name("ray")
    return str(exe) if exe.exists() else (shutil.which("ray") or "ray")


def _run(args: list[str], env: dict[str, str]) -> None:
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=180)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")


@contextlib.contextmanager
def local_cluster(
    *, head_cpus: float = 1, side_cpus: float = 2, second_node: bool = True, port: int | None = None
) -> Iterator[str]:
    """Start the two nodes (or only the head); yield its address (``127.0.0.1:PORT``); stop."""
    # A short temp dir: Ray's socket paths under it must stay below 108 bytes (AF_UNIX).
    temp_dir = Path(tempfile.mkdtemp(prefix="osmosis-ray-", dir="/tmp"))
    port = port or int(os.environ.get("OSMOSIS_RAY_PORT", "6391"))
    # Token auth off (loopback only): otherwise a ~/.ray/auth_token left by any local
    # ray.init() switches some nodes to token mode and the second node cannot join.
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", RAY_DISABLE_DOCKER_CPU_WARNING="1",
               RAY_AUTH_MODE="disabled",
               # No OOM killer: on a shared machine other jobs fill memory and Ray would kill
               # these few-hundred-MB actors for it (a real death is the test's own kill).
               RAY_memory_monitor_refresh_ms="0")
    common = ["--node-ip-address", "127.0.0.1", "--object-store-memory", _STORE, "--disable-usage-stats"]
    ray = _ray()
    address = f"127.0.0.1:{port}"
    try:
        _run([ray, "start", "--head", "--port", str(port), "--num-cpus", str(head_cpus),
              "--resources", json.dumps({"head": 1}), "--include-dashboard", "false",
              "--temp-dir", str(temp_dir), "--ray-client-server-port", str(port + 1),
              "--min-worker-port", str(port + 100), "--max-worker-port", str(port + 300),
              *common], env)
        if second_node:
            _run([ray, "start", "--address", address, "--num-cpus", str(side_cpus),
                  "--resources", json.dumps({"side": 1}),
                  "--min-worker-port", str(port + 400), "--max-worker-port", str(port + 600),
                  *common], env)
        yield address
    finally:
        subprocess.run([ray, "stop", "--force"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(temp_dir, ignore_errors=True)
