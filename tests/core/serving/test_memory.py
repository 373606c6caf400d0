"""return_freed_memory hands freed heap pages back to the OS (glibc only)."""

from __future__ import annotations

import os
import platform

import pytest

from osmosis_ai.serving import return_freed_memory


def _rss_mb() -> float:
    with open(f"/proc/{os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


@pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only"
)
def test_freed_heap_goes_back_to_the_os() -> None:
    # 64 KiB blocks sit below glibc's mmap threshold, so they come from the heap; keeping
    # every 16th alive pins the heap, so free() alone cannot shrink it from the top.
    blocks = [bytearray(b"x" * 65536) for _ in range(3200)]  # ~210 MB, touched
    kept = blocks[::16]
    del blocks
    before = _rss_mb()
    assert return_freed_memory() is True
    after = _rss_mb()
    assert before - after > 100, (before, after)
    assert all(len(b) == 65536 for b in kept)  # what is still referenced is intact


def test_finds_malloc_trim_without_child_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    from osmosis_ai.serving import _memory

    def no_children(*args: object, **kwargs: object) -> None:
        raise AssertionError("a child process forked from a big process inflates ru_maxrss")

    monkeypatch.setattr(subprocess, "Popen", no_children)
    _memory._malloc_trim.cache_clear()
    return_freed_memory()
