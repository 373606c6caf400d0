"""osmosis-ai 0.3's path for framework integrations (import each framework's module:
``osmosis_ai.rollout.integrations.agents.strands`` / ``.openai_agents``).

They are faces over :mod:`osmosis_integrations`, the adapters every osmosis rollout uses.
"""

from __future__ import annotations

__all__: list[str] = []
