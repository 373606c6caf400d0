"""Finding the rollout in an entrypoint file: one workflow, at most one grader, their configs.

The file is imported as a synthetic module (``_osmosis_rollout_<hash of its path>``) with its
folder on ``sys.path``, so it can import its sibling modules. Only classes *defined* in the file
count: a workflow imported from elsewhere (a base class, a library) is never picked up.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import importlib.util
import inspect
import sys
import traceback
from abc import ABC, abstractmethod
from copy import deepcopy
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from types import ModuleType
from typing import Any

from osmosis_ai.errors import DiscoveryError
from osmosis_ai.rollout._grader import Grader
from osmosis_ai.rollout._workflow import AgentWorkflow, AgentWorkflowConfig, GraderConfig

__all__ = ["Entrypoint", "ServedBackend", "capture_backends", "load_entrypoint", "module_name_for"]


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
        backend: the ``osmosis_ai.rollout.backend.ExecutionBackend`` the entrypoint serves (an
            osmosis-ai 0.3 entrypoint), or ``None``; it decides where workflows run.
    """

    workflow_cls: type[AgentWorkflow[Any]]
    grader_cls: type[Grader[Any]] | None
    workflow_config: Any = None
    grader_config: Any = None
    path: Path | None = None
    module_name: str = ""
    backend: Any = None

    def new_workflow(self) -> AgentWorkflow[Any]:
        """A fresh workflow for one rollout, built from a deep copy of the config."""
        return self.workflow_cls(deepcopy(self.workflow_config))

    def new_grader(self) -> Grader[Any] | None:
        """A fresh grader for one rollout (``None`` when the rollout has no grader)."""
        if self.grader_cls is None:
            return None
        return self.grader_cls(deepcopy(self.grader_config))


_built: list[ServedBackend] | None = None


class ServedBackend(ABC):
    """What discovery needs of a backend an osmosis-ai 0.3 entrypoint serves.

    ``osmosis_ai.rollout.backend.ExecutionBackend`` derives from it. It lives here, in the
    layer below the backends, so that discovery recognises a served backend (one built while
    the file is imported, or a ``LocalBackend(...)`` call written in it) without importing the
    backend package, which itself imports this module. Subclasses call ``super().__init__()``.
    """

    def __init__(self) -> None:
        if _built is not None:
            _built.append(self)

    @abstractmethod
    def entrypoint(self) -> Entrypoint:
        """The workflow, grader and configs this backend runs."""

    def validate(self) -> None:  # noqa: B027 - an optional hook, empty by design
        """Check that this backend can run here (raise with what to install or fix)."""


class capture_backends:  # noqa: N801 - used as a context manager, named like one
    """Collect every :class:`ServedBackend` built inside the ``with`` block (discovery)."""

    def __enter__(self) -> list[ServedBackend]:
        global _built
        self._previous = _built
        _built = []
        return _built

    def __exit__(self, *_: object) -> None:
        global _built
        _built = self._previous


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
    with capture_backends() as built:
        module = _import(file)
    served = _served_backend(file, module, built)
    if served is not None:
        return _from_backend(file, module, served)
    workflows = _defined(module, AgentWorkflow)
    graders = _defined(module, Grader)
    if not workflows:
        workflows, graders = _imported(module, AgentWorkflow), _imported(module, Grader)
        if len(workflows) != 1:
            workflows = []
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
    _forget_other_rollouts_modules(file.parent)
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
        if (exc.name or "").split(".")[0] == "harbor":
            raise DiscoveryError(
                f"{_where(file, exc)}: importing the entrypoint failed: {exc}. HarborBackend "
                "does not need the upstream harbor package (Python >= 3.12): pass "
                "orchestrator=N (trials at once) instead of TrialQueue(n_concurrent=N) and leave "
                "environment_config out (Docker), or install harbor where Python is >= 3.12"
            ) from exc
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


def _forget_other_rollouts_modules(folder: Path) -> None:
    """Drop cached modules that this rollout's own sibling modules would be shadowed by.

    osmosis-ai 0.3 workspaces give every rollout the same package name (``multiply_rollout``
    beside each ``main.py``). Loading a second rollout in the same process must import its own
    package, not reuse the first one's from ``sys.modules``.
    """
    names = {p.stem for p in folder.glob("*.py")} | {
        p.name for p in folder.iterdir() if p.is_dir() and (p / "__init__.py").is_file()
    }
    names -= set(sys.stdlib_module_names) | {"osmosis_ai", "osmosis_integrations"}
    for cached in list(sys.modules):
        if cached.split(".")[0] not in names:
            continue
        where = getattr(sys.modules[cached], "__file__", None)
        if where is None or {"site-packages", "dist-packages"} & set(Path(where).parts):
            continue  # an installed package, not another rollout's own module
        if not Path(where).resolve().is_relative_to(folder.resolve()):
            del sys.modules[cached]


def _where(file: Path, exc: BaseException) -> str:
    """``file:line`` of the deepest frame of ``exc`` inside the entrypoint (else the file)."""
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if Path(frame.filename) == file:
            line = frame.lineno
    return f"{file}:{line}" if line else str(file)


def _served_backend(
    file: Path, module: ModuleType, built: list[ServedBackend]
) -> ServedBackend | None:
    """The ``ExecutionBackend`` an osmosis-ai 0.3 entrypoint serves, or ``None``.

    One built while the file was imported wins; otherwise a ``LocalBackend(...)`` (or other
    backend) call written in the file, typically in ``main()`` under the ``__main__`` guard,
    is built from its arguments evaluated at module level. ``main()`` itself never runs: it
    would start a server.
    """
    if len(built) > 1:
        names = ", ".join(type(b).__name__ for b in built)
        raise DiscoveryError(
            f"{file}: importing the entrypoint built {len(built)} execution backends ({names}); "
            "an entrypoint serves one. Build the others inside a function"
        )
    if built:
        return built[0]
    calls = _backend_calls(file, module, ServedBackend)
    if not calls:
        return None
    if len(calls) > 1:
        lines = ", ".join(str(call.lineno) for call, _ in calls)
        raise DiscoveryError(
            f"{file}: found {len(calls)} execution backend constructions (lines {lines}); an "
            "entrypoint serves one backend. Keep one"
        )
    call, cls = calls[0]
    try:
        args = [_evaluate(file, module, arg) for arg in call.args]
        kwargs = {kw.arg: _evaluate(file, module, kw.value) for kw in call.keywords if kw.arg}
    except NameError as exc:
        raise DiscoveryError(
            f"{file}:{call.lineno}: {cls.__name__}(...) uses {exc.name!r}, which is not defined "
            "at module level. osmosis builds the backend from module-level names without "
            f"running main(): define {exc.name!r} at module level (or import it there)"
        ) from exc
    try:
        served: ServedBackend = cls(*args, **kwargs)
    except Exception as exc:
        raise DiscoveryError(
            f"{file}:{call.lineno}: {cls.__name__}(...) raised {type(exc).__name__}: {exc}"
        ) from exc
    return served


def _backend_calls(file: Path, module: ModuleType, base: type) -> list[tuple[ast.Call, type]]:
    """Calls in the file whose callee names a concrete ``base`` subclass at module level."""
    try:
        tree = ast.parse(file.read_text(encoding="utf-8"), filename=str(file))
    except (OSError, SyntaxError, ValueError):
        return []
    found: list[tuple[ast.Call, type]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name | ast.Attribute):
            continue
        try:
            callee = _evaluate(file, module, node.func)
        except Exception:
            continue
        if inspect.isclass(callee) and issubclass(callee, base) and not inspect.isabstract(callee):
            found.append((node, callee))
    return sorted(found, key=lambda item: item[0].lineno)


def _evaluate(file: Path, module: ModuleType, node: ast.expr) -> Any:
    """Evaluate one expression of the file in its module namespace."""
    code = compile(ast.Expression(body=node), str(file), "eval")
    return eval(code, vars(module))  # noqa: S307 - the user's own entrypoint, already imported


def _from_backend(file: Path, module: ModuleType, served: ServedBackend) -> Entrypoint:
    """The entrypoint a served backend runs, checked like one discovered in the file."""
    entry: Entrypoint = served.entrypoint()
    for cls, method in ((entry.workflow_cls, "run"), (entry.grader_cls, "grade")):
        if cls is not None and not inspect.iscoroutinefunction(getattr(cls, method)):
            raise DiscoveryError(
                f"{file}: {_describe(cls)}.{method} must be a coroutine: declare it with "
                f"'async def {method}(self, ctx)'"
            )
    try:
        served.validate()
    except Exception as exc:
        raise DiscoveryError(
            f"{file}: the entrypoint serves a {type(served).__name__}, which cannot run here: "
            f"{exc}"
        ) from exc
    return dataclasses.replace(entry, path=file, module_name=module.__name__, backend=served)


def _imported(module: ModuleType, base: type) -> list[type[Any]]:
    """Concrete subclasses of ``base`` imported into the module from the user's own code."""
    found = []
    for obj in vars(module).values():
        if (
            inspect.isclass(obj)
            and issubclass(obj, base)
            and not inspect.isabstract(obj)
            and not obj.__module__.startswith(("osmosis_ai.", "osmosis_integrations."))
            and obj not in found
        ):
            found.append(obj)
    return found


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
        f"{file}: no AgentWorkflow subclass is defined in this file{seen}. Define one here "
        "('class MyWorkflow(AgentWorkflow): async def run(self, ctx): ...'), import exactly one, "
        "or serve it as osmosis-ai 0.3 entrypoints do: "
        "LocalBackend(workflow=MyWorkflow, workflow_config=..., grader=MyGrader) "
        "passed to create_rollout_server(backend=...)"
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
