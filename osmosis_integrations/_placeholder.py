"""``OsmosisRolloutModel``: the placeholder that stands where a model goes in rollout code.

Rollout code never names the model it trains or evaluates. Inside a rollout the placeholder
resolves through the ambient :class:`~osmosis_ai.rollout.RolloutScope` to the policy route of the
current sample: in training the gateway serving the policy being trained, in ``osmosis eval`` the
gateway in front of the model the eval config (or ``--model``) names. This module imports no
agent framework.
"""

from __future__ import annotations

import copy
from typing import Any

from osmosis_ai.rollout.scope import DEFAULT_SAMPLE_ID, PolicyRoute, current_rollout

__all__ = ["POLICY_MODEL_NAME", "OsmosisRolloutModel"]

POLICY_MODEL_NAME = "osmosis-policy"
"""The model name adapters send. It matches no vendor prefix (``gpt-5*`` would make the Agents SDK
inject reasoning settings); the gateway rewrites it to the served policy name."""

_RESERVED = {
    "model": "the model is chosen by the eval config ([model] / --model) or the training run",
    "model_id": "the model is chosen by the eval config ([model] / --model) or the training run",
    "base_url": "the policy URL comes from the rollout (the osmosis gateway)",
    "api_base": "the policy URL comes from the rollout (the osmosis gateway)",
    "api_key": "the policy credentials come from the rollout (the osmosis gateway)",
    "client_args": "the policy connection comes from the rollout (the osmosis gateway)",
}


class OsmosisRolloutModel:
    """Placeholder for the policy model; put it where your agent's model goes.

    Keyword arguments are sampling parameters forwarded with every policy call (``temperature``,
    ``top_p``, ``max_tokens``, ``stop``, ``seed``, ``extra_body`` ...). In training the gateway
    enforces the run's ``[sampling]`` settings over them.

    Args:
        stream: Strands only: stream policy calls (``False`` by default: one non-streaming call
            per turn keeps token data exact; Strands still emits its stream events). The OpenAI
            Agents SDK streams exactly when you use ``Runner.run_streamed``.
        params: sampling parameters as a dict (osmosis-ai 0.3's ``params={...}``).
        **more: sampling parameters as keywords (merged under ``params``).

    Usage (the minimal pattern)::

        from osmosis_integrations import OsmosisRolloutModel, OsmosisStrandsAgent
        agent = OsmosisStrandsAgent(model=OsmosisRolloutModel(temperature=0.7), tools=[add])

        from osmosis_integrations import OsmosisAgent
        agent = OsmosisAgent(name="calc", tools=[add], model=OsmosisRolloutModel())

    Outside a rollout, resolving it raises :class:`~osmosis_ai.errors.NotInRolloutError` naming
    the command that runs the rollout (``osmosis eval run ...``).
    """

    def __init__(
        self, *, stream: bool = False, params: dict[str, Any] | None = None, **more: Any
    ) -> None:
        # ``params={...}`` is how osmosis-ai 0.3 (and Strands' LiteLLMModel) pass them.
        params = {**more, **(params or {})}
        for key, why in _RESERVED.items():
            if key in params:
                raise TypeError(
                    f"OsmosisRolloutModel(..., {key}=...) is not accepted: {why}. "
                    f"Remove {key}= from the OsmosisRolloutModel(...) call."
                )
        self.stream = bool(stream)
        self.params: dict[str, Any] = dict(params)

    def route(self, sample_id: str = DEFAULT_SAMPLE_ID) -> PolicyRoute:
        """The policy route of ``sample_id`` in the current rollout.

        Raises:
            NotInRolloutError: outside a rollout (the message says how to run one).
        """
        return current_rollout("OsmosisRolloutModel").route(sample_id)

    def copy(self) -> OsmosisRolloutModel:
        """An independent copy (params are deep-copied)."""
        return OsmosisRolloutModel(stream=self.stream, **copy.deepcopy(self.params))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        stream = "stream=True" + (", " if args else "") if self.stream else ""
        return f"OsmosisRolloutModel({stream}{args})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, OsmosisRolloutModel):
            return NotImplemented
        return self.stream == other.stream and self.params == other.params

    __hash__ = None  # type: ignore[assignment]  # mutable params: not hashable

    def __getattr__(self, name: str) -> Any:
        # A plain framework agent that was handed the placeholder probes model methods
        # (stream, get_config, get_response ...): say what to do instead of a bare AttributeError.
        if name.startswith("_"):
            raise AttributeError(name)
        raise AttributeError(
            f"OsmosisRolloutModel has no attribute {name!r}: it is a placeholder, not a model. "
            "Pass it to an adapter agent that resolves it to the policy: "
            "OsmosisStrandsAgent(model=OsmosisRolloutModel(), ...) for Strands, or "
            "OsmosisAgent(model=OsmosisRolloutModel(), ...) for the OpenAI Agents SDK "
            "(from osmosis_integrations import ...)."
        )
