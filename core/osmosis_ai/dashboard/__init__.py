"""``osmosis dashboard``: a local web app over the run store and the eval runs.

Torch-free and read-only (except the same stop request as ``osmosis train stop``). The page
is static HTML + JS with uPlot vendored under ``static/vendor`` (no CDN: it works offline).
"""

from __future__ import annotations

from osmosis_ai.dashboard._app import create_app

__all__ = ["create_app"]
