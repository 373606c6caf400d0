"""osmosis-ai 0.3's agent integrations: ``.strands`` and ``.openai_agents`` (import each
explicitly; neither framework is imported here)."""

from __future__ import annotations

__all__: list[str] = []
