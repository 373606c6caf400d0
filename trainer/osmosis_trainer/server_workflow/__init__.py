"""The workflow that runs rollouts on a user's rollout server (protocol G1).

The user's side of the protocol is :mod:`osmosis_ai.remote` (the server); this is the
trainer's side, which plays the cluster.

The normal :class:`~osmosis_ai.rollout.RolloutRunner` drives remote rollouts through a built-in
workflow: per rollout it posts ``/v1/rollout/init`` to the server with the gateway's scoped URL,
the server's LLM calls are recorded by the gateway, and its ``/v1/rollout/completed`` callback
(mounted on the gateway) ends the rollout::

    async with PolicyGateway(engine) as gateway:
        entrypoint = remote_entrypoint_for(config, gateway)   # config.remote is set
        async with RolloutRunner(entrypoint, gateway, n_samples=8) as runner:
            async for outcome in runner.run(rows):
                ...
"""

from __future__ import annotations

import os
from typing import Any, Literal

from osmosis_ai.errors import ConfigError
from osmosis_ai.rollout.running import Entrypoint
from osmosis_trainer.server_workflow._callbacks import RemoteCallbacks
from osmosis_trainer.server_workflow._workflow import (
    API_KEY_ENV,
    RemoteGraderConfig,
    RemoteRewardGrader,
    RemoteRolloutConfig,
    RemoteRolloutError,
    RemoteRolloutWorkflow,
    remote_entrypoint,
)

__all__ = [
    "API_KEY_ENV",
    "RemoteCallbacks",
    "RemoteGraderConfig",
    "RemoteRewardGrader",
    "RemoteRolloutConfig",
    "RemoteRolloutError",
    "RemoteRolloutWorkflow",
    "remote_entrypoint",
    "remote_entrypoint_for",
]


def remote_entrypoint_for(
    config: Any,
    gateway: Any,
    *,
    grader_cls: Any = None,
    grader_config: Any = None,
    max_turns: int = 10,
) -> Entrypoint:
    """The remote entrypoint for a ``TrainingConfig`` (or ``EvalConfig``) with ``[remote]``.

    Mounts the completion callbacks on ``gateway``. The key is ``[remote].api_key``, else
    ``$OSMOSIS_ROLLOUT_API_KEY``. The token budget per rollout is
    ``max_prompt_length + max_response_length`` when the config has a ``[training]`` section.
    With ``[remote] reward = "grader"`` the Grader of ``[experiment] entrypoint`` scores every
    sample (``grader_cls`` overrides it); with ``"server"`` the server's reward is required;
    with ``"auto"`` (the default) the server's reward is kept and that Grader scores the
    samples the server sent without one.
    """
    remote = getattr(config, "remote", None)
    if remote is None:
        raise ConfigError("the config has no [remote] section (server_url, api_key)")
    from osmosis_ai.rollout.running import load_remote_grader, runner_reward_mode

    reward: Literal["server", "grader"] | None = runner_reward_mode(config)
    if reward != "server" and grader_cls is None:
        grader_cls, grader_config = load_remote_grader(config) or (None, None)
    training = getattr(config, "training", None)
    budget = (
        training.max_prompt_length + training.max_response_length if training is not None else 8192
    )
    return remote_entrypoint(
        remote.server_url,
        RemoteCallbacks.attach(gateway),
        api_key=remote.api_key or os.environ.get(API_KEY_ENV),
        grader_cls=grader_cls,
        grader_config=grader_config,
        max_turns=max_turns,
        max_tokens_total=budget,
        reward=reward,
    )
