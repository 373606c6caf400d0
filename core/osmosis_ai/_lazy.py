"""Names a package loads on first use (PEP 562), so importing the package stays light."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_attributes"]


def lazy_attributes(package: str, sources: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: each name of ``sources`` is imported from the
    module it maps to on first use and then kept in the package (later lookups skip the hook).
    """

    def __getattr__(name: str) -> Any:
        if name not in sources:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(sources[name]), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
