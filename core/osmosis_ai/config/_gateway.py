"""``[gateway]`` of eval and training configs: limits of the policy gateway they start."""

from __future__ import annotations

from pydantic import Field

from osmosis_ai.config._base import Section

__all__ = ["GatewayConfig"]


class GatewayConfig(Section):
    """``[gateway]``: what the policy gateway (training, ``osmosis eval``, ``osmosis model
    deploy``) accepts from the agent code that calls it."""

    max_body_bytes: int = Field(default=32 * 1024 * 1024, ge=1024)
    """Largest ``/v1/chat/completions`` request body, in bytes; a larger one is answered 413
    with an OpenAI-style error before it is parsed. The default (32 MiB) fits a long multi-turn
    conversation with tool results; lower it when the gateway is reachable from code you do not
    trust."""
