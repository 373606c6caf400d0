"""osmosis-ai 0.3's Strands face: ``OsmosisRolloutModel`` as a real Strands ``Model``.

0.3 rollouts type their config ``model: strands.models.model.Model`` and fill it with
``OsmosisRolloutModel(params={...})`` (LiteLLM sampling parameters). This class is osmosis's
placeholder and a Strands ``Model`` at once, so that pydantic field accepts it and
``OsmosisStrandsAgent`` resolves it to the policy like any placeholder. It never calls a model
itself: a plain ``strands.Agent`` handed it gets an error saying to use ``OsmosisStrandsAgent``.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any, NoReturn

from strands.models.model import Model

from osmosis_integrations._placeholder import POLICY_MODEL_NAME
from osmosis_integrations._placeholder import OsmosisRolloutModel as _Placeholder
from osmosis_integrations._strands import OsmosisStrandsAgent

__all__ = ["OsmosisRolloutModel", "OsmosisStrandsAgent"]

_NOT_A_MODEL = (
    "OsmosisRolloutModel is a placeholder for the policy, not a model to call: build the agent "
    "as OsmosisStrandsAgent(model=config.model, ...) inside AgentWorkflow.run() (from "
    "osmosis_ai.rollout.integrations.agents.strands import OsmosisStrandsAgent)"
)


class OsmosisRolloutModel(_Placeholder, Model):
    """The policy placeholder as a Strands ``Model`` (osmosis-ai 0.3's constructor).

    Args:
        params: LiteLLM / OpenAI sampling parameters (``temperature``, ``top_p``,
            ``max_tokens`` ...), sent with every policy call.
        stream: stream policy calls (off by default: one call per turn keeps tokens exact).
        **params_kwargs: more sampling parameters (merged under ``params``).
    """

    def __init__(
        self, *, params: dict[str, Any] | None = None, stream: bool = False, **params_kwargs: Any
    ) -> None:
        super().__init__(stream=stream, **{**params_kwargs, **(params or {})})

    def update_config(self, **model_config: Any) -> None:
        """Merge ``params={...}`` (or bare sampling parameters) into the placeholder's."""
        params = model_config.pop("params", None) or {}
        self.params.update({**model_config, **params})

    def get_config(self) -> dict[str, Any]:
        return {"model_id": POLICY_MODEL_NAME, "params": dict(self.params)}

    # Strands' ``Model.stream`` is a method; the placeholder's ``stream`` is its streaming flag
    # (read by OsmosisStrandsAgent). The flag wins: this class is never streamed from.
    @property  # type: ignore[override,unused-ignore]
    def stream(self) -> bool:
        return bool(self.__dict__.get("_osmosis_stream", False))

    @stream.setter
    def stream(self, value: bool) -> None:
        self.__dict__["_osmosis_stream"] = bool(value)

    def structured_output(self, *args: Any, **kwargs: Any) -> AsyncGenerator[Any, None]:
        _refuse()


def _refuse() -> NoReturn:
    raise TypeError(_NOT_A_MODEL)
