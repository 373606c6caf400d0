"""The ``osmosis`` command line (typer + rich)."""

from __future__ import annotations

from osmosis_ai.cli._app import app, main

__all__ = ["app", "main"]
