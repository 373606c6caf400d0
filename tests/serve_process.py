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
