"""The remote-rollout protocol's old address: it lives in :mod:`osmosis_ai.remote` now.

Projects made from earlier templates import ``osmosis_ai.rollout.remote``; every public name
of the room still imports from here (the same objects).
"""

from __future__ import annotations

from osmosis_ai.remote import *  # noqa: F403
from osmosis_ai.remote import __all__ as __all__
