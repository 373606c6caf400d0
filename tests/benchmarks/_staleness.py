"""Refresh every BENCHMARKS.md section from its stored results.

Each section is rendered by its own module from the raw runs it stored (``_stored.Sitting``,
or the learning modules' own stores), and says **stale** when the code it measured has changed
since (a fingerprint of that code, kept with the runs). ``python -m tests.benchmarks stale``
re-renders them all against today's code without measuring; a section with no stored results
keeps its text (rendering it would only say there are none).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable
from pathlib import Path

from tests.benchmarks._report import REPORT
from tests.benchmarks._stored import Sitting

__all__ = ["rerender", "stale_sections"]

OWN_STORES = ("learning", "learning_search")
"""Benchmarks with a store of their own (learning runs), always rendered."""

_SECTION = re.compile(r"<!-- bench:(\w+) -->\n(.*?)<!-- /bench:\1 -->", re.S)


def rerender(names: Iterable[str]) -> list[str]:
    """Render each named benchmark's section from its stored results; returns those rendered."""
    done = []
    for name in names:
        module = importlib.import_module(f"tests.benchmarks.bench_{name}")
        render = getattr(module, "render", None)
        stored = name in OWN_STORES or Sitting.exists(getattr(module, "NAME", name))
        if callable(render) and stored and _takes_no_arguments(render):
            render()
            done.append(name)
    return done


def stale_sections(report: Path = REPORT) -> list[str]:
    """The sections of ``report`` that say **stale** at their top or in a table."""
    text = report.read_text() if report.exists() else ""
    return [m.group(1) for m in _SECTION.finditer(text) if "**stale**" in m.group(2).lower()]


def _takes_no_arguments(fn: object) -> bool:
    import inspect

    try:
        return not any(
            p.default is p.empty
            for p in inspect.signature(fn).parameters.values()  # type: ignore[arg-type]
        )
    except (TypeError, ValueError):
        return False
