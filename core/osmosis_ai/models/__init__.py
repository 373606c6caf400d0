"""Trained models: the checkpoints of training runs, named ``RUN[:STEP]`` by the CLI.

``resolve_checkpoint("calc:best", Path("runs"))`` gives the checkpoint folder, its PEFT
adapter and the run's base model; ``find_checkpoints(Path("runs"))`` lists them all.
Serving and exporting need torch and run in ``osmosis_trainer`` (``osmosis model deploy`` /
``osmosis model export`` start it as a subprocess).
"""

from __future__ import annotations

from osmosis_ai.models._refs import (
    CheckpointRef,
    ModelRefError,
    find_checkpoints,
    looks_like_checkpoint_ref,
    resolve_checkpoint,
)

__all__ = [
    "CheckpointRef",
    "ModelRefError",
    "find_checkpoints",
    "looks_like_checkpoint_ref",
    "resolve_checkpoint",
]
