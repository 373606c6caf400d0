"""A rollout worker process stays light: importing the actor's module pulls in neither torch nor
the training loop (each worker would pay seconds and hundreds of MB for what it never runs)."""

from __future__ import annotations

import subprocess
import sys


def test_the_rollout_worker_module_imports_without_torch() -> None:
    code = (
        "import sys\n"
        "import osmosis_trainer.distributed._actor\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'osmosis_trainer.loop')"
        " if m in sys.modules)\n"
        "print(','.join(heavy))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == ""


def test_the_package_still_exports_its_names() -> None:
    import osmosis_trainer.distributed as distributed

    for name in distributed.__all__:
        assert getattr(distributed, name).__name__ == name
