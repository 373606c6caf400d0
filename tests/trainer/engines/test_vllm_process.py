"""The launched vLLM server's process ends with the script that launched it, closed or not
(a fake server stands in for vLLM: the engine only needs ``/health``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

_FAKE_SERVER = """
import http.server, os, sys
from pathlib import Path
Path(sys.argv[1]).write_text(str(os.getpid()))
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[2])), Health).serve_forever()
"""

_SCRIPT = """
import asyncio, sys
from osmosis_trainer.engines import VLLMEngine
engine = VLLMEngine(model_path=sys.argv[1], startup_timeout_s=300)
engine._launch_command = lambda port: [sys.executable, sys.argv[2], sys.argv[3], str(port)]
asyncio.run(engine._launch())
print("launched, leaving without close()", flush=True)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_server_left_open_ends_when_its_script_ends(tiny_model_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "fake_server.py").write_text(_FAKE_SERVER)
    (tmp_path / "script.py").write_text(_SCRIPT)
    pid_file = tmp_path / "server.pid"
    done = subprocess.run(
        [sys.executable, str(tmp_path / "script.py"), str(tiny_model_dir),
         str(tmp_path / "fake_server.py"), str(pid_file)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "launched" in done.stdout
    pid = int(pid_file.read_text())
    try:
        # The launcher waited for it (SIGTERM, then wait), so no zombie is left either.
        assert not _alive(pid), "the server outlived the script that launched it"
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
