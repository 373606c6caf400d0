"""osmosis-ai 0.3's module path for :class:`Grader` (the same class as
``osmosis_ai.rollout.Grader``)."""

from __future__ import annotations

from osmosis_ai.rollout._grader import Grader, GraderContext

__all__ = ["Grader", "GraderContext"]
