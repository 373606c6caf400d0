"""Where a remote rollout's reward comes from (``[remote] reward``), checked before a run starts.

It lives beside discovery (it loads the entrypoint's Grader) and is public through
:mod:`osmosis_ai.rollout.running`, for the CLI's checks and the trainer's remote runs.

- ``"auto"`` (the default): the server's reward when its result carries one, else the
  ``Grader`` defined in ``[experiment] entrypoint``. A server may leave the reward out (the
  seeds' servers send it "only if the platform is configured to compute reward in remote
  rollout"), so without a Grader nothing is sure to score a sample: that is an error here,
  at validate time, not a training run whose every sample fails.
- ``"server"``: always the server's; no Grader is loaded.
- ``"grader"``: always the Grader's; the server's reward is ignored.
"""

from __future__ import annotations

from typing import Any, Literal

from osmosis_ai.errors import ConfigError

__all__ = ["describe_reward_source", "load_remote_grader", "runner_reward_mode"]


def runner_reward_mode(config: Any) -> Literal["server", "grader"] | None:
    """The ``reward`` argument of the trainer's remote entrypoint: ``None`` means "the
    server's when sent, else the Grader's" (``"auto"``)."""
    reward = getattr(config.remote, "reward", "server")  # duck-typed configs: the old default
    if reward == "auto":
        return None
    return "grader" if reward == "grader" else "server"


def load_remote_grader(config: Any) -> tuple[type[Any], Any] | None:
    """The ``(Grader class, grader_config)`` a ``[remote]`` config scores with (``None`` for
    ``reward = "server"``).

    Raises:
        ConfigError: ``reward = "auto"`` (the default) and the entrypoint is missing or
            defines no Grader, so no reward is sure to come; the message says both fixes.
        DiscoveryError: ``reward = "grader"`` without a loadable Grader (file, line, fix).
    """
    from osmosis_ai.errors import DiscoveryError
    from osmosis_ai.rollout._discovery import load_grader

    reward = getattr(config.remote, "reward", "server")  # duck-typed configs: the old default
    if reward == "server":
        return None
    entry = config.entrypoint_path(must_exist=False)
    if reward == "grader":
        return load_grader(entry)
    where = config._where_key("remote", "reward") if config.source_path else "config"
    fix = (
        f'set [remote] reward = "server" in {config.source_path or "the config"} if the server '
        "sends a reward with every result (ctx.complete(messages, reward=...)), or define a "
        f"Grader in {entry}"
    )
    if not entry.is_file():
        raise ConfigError(
            f'{where}: [remote] reward = "auto" (the default) takes the server\'s reward when '
            f"it sends one, else the Grader in [experiment] entrypoint, but {entry} does not "
            f"exist, so nothing is sure to produce a reward: {fix}"
        )
    try:
        return load_grader(entry)
    except DiscoveryError as exc:
        if "found none" not in str(exc):
            raise  # the file does not import, or defines two graders: its own message
        raise ConfigError(
            f'{where}: [remote] reward = "auto" (the default) takes the server\'s reward when '
            f"it sends one, else the Grader in [experiment] entrypoint, but {entry} defines no "
            f"Grader, so nothing is sure to produce a reward: {fix}"
        ) from None


def describe_reward_source(config: Any, grader: tuple[type[Any], Any] | None) -> str:
    """One line saying where the rewards of a ``[remote]`` config come from."""
    reward = getattr(config.remote, "reward", "server")  # duck-typed configs: the old default
    name = grader[0].__name__ if grader else None
    if reward == "server":
        return "rewards: the server's (a result without one fails its sample)"
    if reward == "grader":
        return f"rewards: the Grader {name} (the server's reward is ignored)"
    return f"rewards: the server's when it sends one, else the Grader {name}"
