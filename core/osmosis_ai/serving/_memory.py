"""Give the heap memory a finished engine or update freed back to the operating system.

glibc keeps freed heap memory for reuse instead of returning it, and after a large block is
freed it raises its mmap threshold, so later tensors of that size land on the heap too. In one
process that loads and drops engines (a run's held-out evals) and frees activations every
step, the resident size then only grows: the quick start's worker reached ~14 GB. Measured on
the embedded model (one engine life, 32 generations of ~1,000-token prompts): 2.62 GB resident
after close as things were, 0.45 GB with a trim after close; capping the arenas
(``MALLOC_ARENA_MAX=2``) did not help (2.95 GB).
"""

from __future__ import annotations

import ctypes
import functools
import gc
import sys
from collections.abc import Callable

__all__ = ["return_freed_memory"]


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None off glibc (musl, macOS, Windows: nothing to do).

    Looked up in the symbols the process already has (``CDLL(None)``), not with
    ``ctypes.util.find_library``: that runs ``ldconfig``/``gcc`` in child processes, and a child
    forked from a process of several GB reports that size as its own peak (``ru_maxrss``), which
    doubled the trainer benchmark's measured peak.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def return_freed_memory() -> bool:
    """Collect garbage, then return free heap pages to the OS; True when glibc trimmed any.

    Safe from any thread: ``malloc_trim`` locks each arena while it walks it. Costs a few to
    a few tens of milliseconds on a heap of several GB, so call it between phases (an engine
    closed, an update done), not per token.
    """
    gc.collect()
    trim = _malloc_trim()
    return bool(trim(0)) if trim is not None else False
