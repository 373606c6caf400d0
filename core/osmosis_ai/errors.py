"""The exception tree of osmosis. Every error the project raises on purpose derives from one root.

::

    OsmosisError
    ├── ConfigError (ValueError)          a TOML config is wrong: names file, key path, fix
    ├── DatasetError (ValueError)         a dataset row or file is wrong: names file, line, column
    ├── UnreadableFileError (ValueError)  one file cannot be read safely: a link, a FIFO, too
    │                                     big or deep, not UTF-8; carries path, reason
    ├── DiscoveryError                    an entrypoint has zero/two workflows, bad import, ...
    ├── MissingExtraError (ImportError)   an optional framework is not installed
    ├── NotInRolloutError (RuntimeError)  rollout-only API used outside a rollout
    ├── AgentReuseError (RuntimeError)    an adapter agent built for one rollout used in another
    ├── RewardError (ValueError)          a grader set a non-finite or unknown reward
    ├── PolicyCallError                   a policy (LLM) call failed; carries status and body
    ├── TemplateError                     a scaffold cannot be written (bad name, existing files)
    └── TrainingError                     the trainer stopped a run (failure budget, NaN loss)
"""

from __future__ import annotations

__all__ = [
    "AgentReuseError",
    "ConfigError",
    "DatasetError",
    "DiscoveryError",
    "MissingExtraError",
    "NotInRolloutError",
    "OsmosisError",
    "PolicyCallError",
    "RewardError",
    "TemplateError",
    "TrainingError",
    "UnreadableFileError",
    "require_extra",
]


class OsmosisError(Exception):
    """Root of every error osmosis raises on purpose."""


class ConfigError(OsmosisError, ValueError):
    """A config file or value is invalid. The message names the file, the key path and the fix."""


class DatasetError(OsmosisError, ValueError):
    """A dataset is invalid. The message names the file, the line or row, the column."""


class UnreadableFileError(OsmosisError, ValueError):
    """One file cannot be read safely (see ``osmosis_ai.safe_io``): "this file is unreadable:
    PATH: REASON". ``missing`` is set when there is no such file."""

    def __init__(self, path: object, reason: str, *, missing: bool = False) -> None:
        super().__init__(f"this file is unreadable: {path}: {reason}")
        self.path = str(path)
        self.reason = reason
        self.missing = missing


class DiscoveryError(OsmosisError):
    """An entrypoint file does not define exactly one workflow and at most one grader."""


class MissingExtraError(OsmosisError, ImportError):
    """An optional dependency is missing; the message names the ``pip install`` command."""

    def __init__(
        self, feature: str, extra: str, module: str, *, install: str | None = None
    ) -> None:
        self.feature = feature
        self.extra = extra
        self.module = module
        self.install = install or f'pip install "osmosis-ai[{extra}]"'
        super().__init__(
            f"{feature} needs the '{module}' package, which is not installed. "
            f"Install it with: {self.install}"
        )


class NotInRolloutError(OsmosisError, RuntimeError):
    """Rollout-scoped API (the placeholder model, ``ctx.chat``) was used outside a rollout."""


class AgentReuseError(OsmosisError, RuntimeError):
    """A framework agent that holds one rollout's conversation was used in another rollout."""


class RewardError(OsmosisError, ValueError):
    """A grader set a reward that is not a finite number, or for an unknown sample id."""


class PolicyCallError(OsmosisError):
    """A call to the policy endpoint failed.

    Attributes:
        status_code: HTTP status of the failed call, or ``None`` for transport errors.
        body: the response body (truncated), if any.
    """

    def __init__(self, message: str, *, status_code: int | None = None, body: str = "") -> None:
        self.status_code = status_code
        self.body = body
        super().__init__(message)


class TemplateError(OsmosisError):
    """A template cannot be applied: unknown template, invalid name, or files already exist."""


class TrainingError(OsmosisError):
    """A training run had to stop (failure budget exceeded, NaN loss, ...)."""


def require_extra(module: str, *, extra: str, feature: str) -> None:
    """Raise :class:`MissingExtraError` unless ``module`` can be imported."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise MissingExtraError(feature, extra, module)
