"""Finding the rollout in an entrypoint file: one workflow, at most one grader, their configs.

The file is imported as a synthetic module (``_osmosis_rollout_<hash of its path>``) with its
folder on ``sys.path``, so it can import its sibling modules. Only classes *defined* in the file
count: a workflow imported from elsewhere (a base class, a library) is never picked up.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import sys
import traceback
from copy import deepcopy
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from types import ModuleType
from typing import Any

from osmosis_ai.errors import DiscoveryError
from osmosis_ai.rollout._grader import Grader
from osmosis_ai.rollout._workflow import AgentWorkflow, AgentWorkflowConfig, GraderConfig

__all__ = ["Entrypoint", "load_entrypoint", "module_name_for"]


@dataclass(frozen=True, eq=False)
class Entrypoint:
    """A loaded rollout: the workflow class, the optional grader class and their configs.

    Attributes:
        workflow_cls: the one concrete ``AgentWorkflow`` subclass defined in the file.
        grader_cls: the concrete ``Grader`` subclass defined in the file, or ``None``.
        workflow_config: the module-level workflow config (``workflow_config`` or the single
            ``AgentWorkflowConfig`` instance), or ``None``.
        grader_config: likewise for the grader (``grader_config`` / a ``GraderConfig``).
        path: the entrypoint file (absolute).
        module_name: the synthetic module the file was imported as.
    """

    workflow_cls: type[AgentWorkflow[Any]]
    grader_cls: type[Grader[Any]] | None
    workflow_config: Any = None
    grader_config: Any = None
    path: Path | None = None
    module_name: str = ""

    def new_workflow(self) -> AgentWorkflow[Any]:
        """A fresh workflow for one rollout, built from a deep copy of the config."""
        return self.workflow_cls(deepcopy(self.workflow_config))

    def new_grader(self) -> Grader[Any] | None:
        """A fresh grader for one rollout (``None`` when the rollout has no grader)."""
        if self.grader_cls is None:
            return None
        return self.grader_cls(deepcopy(self.grader_config))


def module_name_for(path: Path) -> str:
    """The synthetic module name of an entrypoint file (stable across processes)."""
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    return f"_osmosis_rollout_{digest}"


def load_entrypoint(path: str | PathLike[str]) -> Entrypoint:
    """Import an entrypoint file and find its workflow, grader and configs.

    Raises:
        DiscoveryError: the file is missing, does not import (syntax error, missing module,
            an exception at import time), or does not define exactly one concrete
            ``AgentWorkflow`` subclass and at most one concrete ``Grader`` subclass. The message
            names the file, the line where possible, the classes found and the fix.
    """
    file = Path(path).resolve()
    if not file.is_file():
        raise DiscoveryError(
            f"{path}: entrypoint file not found. Check [experiment].rollout and "
            "[experiment].entrypoint in your config (the file is rollouts/<rollout>/<entrypoint>)"
        )
    module = _import(file)
    workflows = _defined(module, AgentWorkflow)
    graders = _defined(module, Grader)
    if len(workflows) != 1:
        raise DiscoveryError(_workflow_count_message(file, module, workflows))
    if len(graders) > 1:
        names = ", ".join(_describe(c) for c in graders)
        raise DiscoveryError(
            f"{file}: found {len(graders)} Grader subclasses ({names}); an entrypoint defines at "
            "most one. Keep one grader here and move the others to another module (or make a "
            "shared base class abstract)"
        )
    workflow_cls, grader_cls = workflows[0], (graders[0] if graders else None)
    for cls, method in ((workflow_cls, "run"), (grader_cls, "grade")):
        if cls is not None and not inspect.iscoroutinefunction(getattr(cls, method)):
            raise DiscoveryError(
                f"{file}: {_describe(cls)}.{method} must be a coroutine: declare it with "
                f"'async def {method}(self, ctx)'"
            )
    return Entrypoint(
        workflow_cls=workflow_cls,
        grader_cls=grader_cls,
        workflow_config=_config(file, module, "workflow_config", AgentWorkflowConfig),
        grader_config=_config(file, module, "grader_config", GraderConfig),
        path=file,
        module_name=module.__name__,
    )


def load_grader(path: str | PathLike[str]) -> tuple[type[Grader[Any]], Any]:
    """Import a file and return its one ``Grader`` subclass and its ``grader_config``.

    For rollouts whose workflow runs elsewhere (a remote rollout server with
    ``[remote] reward = "grader"``): the file needs no ``AgentWorkflow``.

    Raises:
        DiscoveryError: the file is missing or does not import, or defines no concrete
            ``Grader`` subclass or more than one.
    """
    file = Path(path).resolve()
    if not file.is_file():
        raise DiscoveryError(
            f"{path}: grader file not found. [remote] reward = \"grader\" scores rollouts "
            "with the Grader in [experiment].entrypoint (rollouts/<rollout>/<entrypoint>)"
        )
    module = _import(file)
    graders = _defined(module, Grader)
    if len(graders) != 1:
        names = ", ".join(_describe(c) for c in graders)
        found = f"found {len(graders)} ({names})" if graders else "found none"
        raise DiscoveryError(
            f"{file}: [remote] reward = \"grader\" needs exactly one Grader subclass defined in "
            f"this file; {found}. Define 'class MyGrader(Grader): async def grade(self, ctx): "
            "...', or set reward = \"server\" when the server sends the reward"
        )
    grader_cls = graders[0]
    if not inspect.iscoroutinefunction(grader_cls.grade):
        raise DiscoveryError(
            f"{file}: {_describe(grader_cls)}.grade must be a coroutine: declare it with "
            "'async def grade(self, ctx)'"
        )
    return grader_cls, _config(file, module, "grader_config", GraderConfig)


def _import(file: Path) -> ModuleType:
    name = module_name_for(file)
    folder = str(file.parent)
    if folder not in sys.path:
        # The rollout's own modules (tools.py, prompts.py ...) import by plain name.
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:  # pragma: no cover - only for non-.py files
        raise DiscoveryError(f"{file}: cannot be imported as a Python module (use a .py file)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        sys.modules.pop(name, None)
        where = f"{exc.filename or file}:{exc.lineno}" if exc.lineno else str(file)
        raise DiscoveryError(
            f"{where}: syntax error: {exc.msg}. Fix the code at that line "
            "(try 'python -m py_compile <file>')"
        ) from exc
    except ImportError as exc:
        sys.modules.pop(name, None)
        missing = f" (module '{exc.name}')" if exc.name else ""
        raise DiscoveryError(
            f"{_where(file, exc)}: importing the entrypoint failed: {exc}{missing}. Install the "
            "missing package (for framework adapters: pip install \"osmosis-ai[strands]\" or "
            "\"osmosis-ai[openai-agents]\") or fix the import"
        ) from exc
    except Exception as exc:
        sys.modules.pop(name, None)
        raise DiscoveryError(
            f"{_where(file, exc)}: importing the entrypoint raised {type(exc).__name__}: {exc}. "
            "Module-level code must not fail; move work that needs the rollout into run()"
        ) from exc
    return module


def _where(file: Path, exc: BaseException) -> str:
    """``file:line`` of the deepest frame of ``exc`` inside the entrypoint (else the file)."""
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if Path(frame.filename) == file:
            line = frame.lineno
    return f"{file}:{line}" if line else str(file)


def _defined(module: ModuleType, base: type) -> list[type[Any]]:
    found = []
    for obj in vars(module).values():
        if (
            inspect.isclass(obj)
            and issubclass(obj, base)
            and obj.__module__ == module.__name__
            and not inspect.isabstract(obj)
        ):
            found.append(obj)
    return found


def _describe(cls: type) -> str:
    try:
        line = inspect.getsourcelines(cls)[1]
    except (OSError, TypeError):
        return cls.__name__
    return f"{cls.__name__} (line {line})"


def _workflow_count_message(file: Path, module: ModuleType, workflows: list[type]) -> str:
    if workflows:
        names = ", ".join(_describe(c) for c in workflows)
        return (
            f"{file}: found {len(workflows)} AgentWorkflow subclasses ({names}); an entrypoint "
            "defines exactly one. Keep one here and move the others to another module (or make "
            "a shared base class abstract)"
        )
    imported = [
        f"{obj.__name__} (imported from {obj.__module__})"
        for obj in vars(module).values()
        if inspect.isclass(obj) and issubclass(obj, AgentWorkflow) and obj is not AgentWorkflow
        and obj.__module__ != module.__name__
    ]
    abstract = [
        f"{obj.__name__} (abstract: implement 'async def run(self, ctx)')"
        for obj in vars(module).values()
        if inspect.isclass(obj) and issubclass(obj, AgentWorkflow)
        and obj.__module__ == module.__name__ and inspect.isabstract(obj)
    ]
    seen = "; found only " + ", ".join(imported + abstract) if imported or abstract else ""
    return (
        f"{file}: no AgentWorkflow subclass is defined in this file{seen}. Define one here: "
        "'class MyWorkflow(AgentWorkflow): async def run(self, ctx): ...' (classes imported "
        "from other modules are not discovered)"
    )


def _config(file: Path, module: ModuleType, name: str, kind: type) -> Any:
    if name in vars(module):
        return vars(module)[name]
    found = [(k, v) for k, v in vars(module).items() if isinstance(v, kind)]
    if len(found) > 1:
        names = ", ".join(k for k, _ in found)
        raise DiscoveryError(
            f"{file}: found {len(found)} {kind.__name__} instances ({names}); osmosis cannot "
            f"tell which one to use. Name the one to use '{name}'"
        )
    return found[0][1] if found else None
