"""Names osmosis-ai 0.3 exported that osmosis does not have, and where their job is done here.

A module of 0.3's public paths answers ``from <path> import <name>`` for such a name with an
``ImportError`` that says what to use instead, never a bare "cannot import name".
"""

from __future__ import annotations

__all__ = ["WIRE", "missing"]

_WIRE_NOTE = (
    "is part of osmosis-ai 0.3's hosted-controller wire protocol. osmosis runs rollouts itself "
    "(osmosis eval run / osmosis train submit load your entrypoint and drive the LocalBackend it "
    "serves); a server made with osmosis_ai.rollout.server.create_rollout_server speaks that "
    "protocol without these types. For remote rollouts see osmosis_ai.remote"
)

WIRE: dict[str, str] = dict.fromkeys(
    (
        "RolloutInitRequest",
        "RolloutInitResponse",
        "RolloutCompleteRequest",
        "RolloutStatusResponse",
        "GraderInitRequest",
        "GraderInitResponse",
        "GraderCompleteRequest",
        "GraderStatus",
        "CancelRolloutsRequest",
        "CancelRolloutsResponse",
    ),
    _WIRE_NOTE,
)


def missing(module: str, name: str, moved: dict[str, str]) -> ImportError | AttributeError:
    """The error for ``module.name``: where it lives here when known, else a plain miss.

    A known name raises ``ImportError`` (not ``AttributeError``, which ``from module import
    name`` would replace with a bare "cannot import name"); ``hasattr`` on it raises too.
    """
    if name in moved:
        return ImportError(f"{module}.{name} {moved[name]}", name=module)
    return AttributeError(f"module {module!r} has no attribute {name!r}")
