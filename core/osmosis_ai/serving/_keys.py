"""Per-process API keys for the servers osmosis starts (the policy gateway, a vLLM child)."""

from __future__ import annotations

import secrets

__all__ = ["new_api_key"]


def new_api_key() -> str:
    """A fresh random bearer key (256 bits, URL-safe).

    Training, eval and ``osmosis test`` give their gateway one per run and hand it to their
    own clients through :meth:`PolicyGateway.route`; it is never written to a run folder.
    """
    return secrets.token_urlsafe(32)
