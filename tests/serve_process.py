"""``osmosis serve`` as a real subprocess on 127.0.0.1, for end-to-end remote-rollout tests."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

OSMOSIS = str(Path(sys.executable).parent / "osmosis")
API_KEY_ENV = "OSMOSIS_ROLLOUT_API_KEY"


@dataclass
class Served:
    url: str
    output: str
    """What the server printed up to its URL line (all of it once the context exits)."""
    returncode: int | None = None


@asynccontextmanager
async def osmosis_serve(cwd: Path, *args: str, api_key: str) -> AsyncIterator[Served]:
    """Run ``osmosis serve ARGS`` in ``cwd`` until its URL is printed; stop it with Ctrl-C.

    ``api_key`` reaches the server through the environment and is also set in this process
    while the context is open (the trainer side reads the same variable).
    """
    env = {**os.environ, API_KEY_ENV: api_key, "NO_COLOR": "1", "COLUMNS": "200"}
    proc = await asyncio.create_subprocess_exec(
        OSMOSIS, "serve", *args, cwd=cwd, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    assert proc.stdout is not None
    output = ""
    served: Served | None = None
    try:
        while (m := re.search(r"URL: (http://\S+)", output)) is None:
            line = await asyncio.wait_for(proc.stdout.readline(), 60)
            assert line, f"osmosis serve exited:\n{output}"
            output += line.decode()
        served = Served(m.group(1), output)
        os.environ[API_KEY_ENV] = api_key
        try:
            yield served
        finally:
            del os.environ[API_KEY_ENV]
    finally:
        proc.send_signal(signal.SIGINT)
        rest, _ = await asyncio.wait_for(proc.communicate(), 30)
        if served is not None:
            served.output += rest.decode()
            served.returncode = proc.returncode


@asynccontextmanager
async def remote_template_run(
    root: Path, model_dir: Path, *, steps: int
) -> AsyncIterator[tuple[Any, Path]]:
    """The ``remote-server`` template in ``root``, its agent loop served by ``osmosis serve``
    from a folder the trainer does not read: yields ``(training config, config file)`` set to
    train ``model_dir`` for ``steps`` steps of 2 rows x 2 samples against that server."""
    from osmosis_ai.config import load_training_config
    from osmosis_ai.templates import create_from_template

    create_from_template("remote-server", "calc", root)
    server_dir = root / "elsewhere"
    (root / "rollouts" / "calc").rename(server_dir)
    config_file = root / "configs" / "training" / "calc.toml"
    config = load_training_config(config_file)
    assert config.remote is not None
    config.experiment.dataset = str(server_dir / "test_data.jsonl")
    # The agent loop lives only in the served process: the trainer needs no entrypoint file.
    async with osmosis_serve(server_dir, "-m", "server:agent_loop", "-p", "0",
                             api_key="k-remote") as served:
        config.remote.server_url = served.url
        config.experiment.model_path = str(model_dir)
        t = config.training
        t.max_steps, t.rollout_batch_size, t.n_samples_per_prompt = steps, 2, 2
        t.max_response_length = 16
        t.max_prompt_length = 8192  # the tiny byte-level tokenizer makes the tools block long
        yield config, config_file
