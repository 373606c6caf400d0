from __future__ import annotations

import subprocess
import sys


def test_core_imports_no_torch_and_no_framework() -> None:
    code = (
        "import sys\n"
        "import osmosis_ai, osmosis_ai.rollout, osmosis_ai.data, osmosis_ai.config\n"
        "heavy = ['torch', 'transformers', 'strands', 'agents', 'litellm', 'openai', 'pyarrow',"
        " 'fastapi', 'numpy']\n"
        "print(','.join(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"heavy modules imported by the core: {out.stdout.strip()}"
