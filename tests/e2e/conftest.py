from __future__ import annotations

from tests.torch_threads import _one_torch_thread  # noqa: F401  (autouse fixture)
