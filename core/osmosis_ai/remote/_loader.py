"""Load an agent loop from a ``module:attr`` spec (``osmosis serve -m server:agent_loop``)."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from osmosis_ai.errors import DiscoveryError
from osmosis_ai.remote._loop import RolloutAgentLoop

__all__ = ["coerce_agent_loop", "load_agent_loop"]


def load_agent_loop(spec: str, *, cwd: str | Path | None = None) -> RolloutAgentLoop:
    """Import ``module:attr`` and return the agent loop it names.

    ``module`` is a dotted module name importable from ``cwd`` (default: the current directory,
    which is put on ``sys.path``) or a path to a ``.py`` file. ``attr`` is a
    :class:`RolloutAgentLoop` instance, or a subclass that is built with no arguments.

    Raises:
        DiscoveryError: the spec is malformed, the import fails, or ``attr`` is not an agent loop.
    """
    module_part, sep, attr = spec.partition(":")
    if not sep or not module_part or not attr:
        raise DiscoveryError(
            f"agent loop spec {spec!r} must look like 'module:attr', e.g. 'server:agent_loop'"
        )
    module = _import(module_part, Path(cwd) if cwd is not None else Path.cwd())
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            found = _candidates(module)
            hint = f"; it defines {', '.join(found)}" if found else "; it defines no agent loop"
            raise DiscoveryError(f"module {module_part!r} has no attribute {attr!r}{hint}")
        target = getattr(target, part)
    try:
        return coerce_agent_loop(target)
    except TypeError as exc:
        raise DiscoveryError(f"{spec}: {exc}") from exc


def coerce_agent_loop(target: Any) -> RolloutAgentLoop:
    """Accept an instance, a subclass (built with no arguments) or a ``module:attr`` string."""
    if isinstance(target, str):
        return load_agent_loop(target)
    if isinstance(target, RolloutAgentLoop):
        return target
    if inspect.isclass(target) and issubclass(target, RolloutAgentLoop):
        if inspect.isabstract(target):
            missing = ", ".join(sorted(target.__abstractmethods__))
            raise TypeError(f"{target.__name__} is abstract; implement {missing}")
        try:
            return target()
        except TypeError as exc:
            raise TypeError(
                f"could not build {target.__name__}() with no arguments ({exc}); "
                "export an instance instead, e.g. agent_loop = MyLoop(...)"
            ) from exc
    raise TypeError(
        f"expected a RolloutAgentLoop instance or subclass, got {type(target).__name__}"
    )


def _import(module_part: str, cwd: Path) -> ModuleType:
    try:
        if module_part.endswith(".py") or "/" in module_part or "\\" in module_part:
            return _import_file((cwd / module_part).resolve())
        if str(cwd) not in sys.path:
            sys.path.insert(0, str(cwd))
        return importlib.import_module(module_part)
    except DiscoveryError:
        raise
    except ModuleNotFoundError as exc:
        if exc.name == module_part or (exc.name and module_part.startswith(exc.name + ".")):
            raise DiscoveryError(
                f"cannot import {module_part!r} from {cwd}: no such module. Run the command from "
                "the folder that holds it, or pass a path like 'path/to/server.py:agent_loop'"
            ) from exc
        raise DiscoveryError(f"importing {module_part!r} failed: {exc}") from exc
    except Exception as exc:
        raise DiscoveryError(
            f"importing {module_part!r} failed: {type(exc).__name__}: {exc}"
        ) from exc


def _import_file(path: Path) -> ModuleType:
    if not path.is_file():
        raise DiscoveryError(f"agent loop file {path} does not exist")
    folder = str(path.parent)
    if folder not in sys.path:  # sibling imports (tools.py, rewards.py) must work
        sys.path.insert(0, folder)
    name = path.stem
    existing = sys.modules.get(name)
    if existing is not None and Path(getattr(existing, "__file__", "") or "").resolve() == path:
        return existing
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:  # pragma: no cover - only for odd files
        raise DiscoveryError(f"cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def _candidates(module: ModuleType) -> list[str]:
    out = []
    for name, value in vars(module).items():
        if isinstance(value, RolloutAgentLoop) or (
            inspect.isclass(value)
            and issubclass(value, RolloutAgentLoop)
            and value is not RolloutAgentLoop
            and not inspect.isabstract(value)
        ):
            out.append(name)
    return out
