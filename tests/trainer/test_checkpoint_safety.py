"""Checkpoints are data, not code: resume never unpickles objects, ``latest`` stays inside."""

from __future__ import annotations

import copy
import random
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from osmosis_ai.errors import TrainingError  # noqa: E402
from osmosis_trainer.checkpoints import (  # noqa: E402
    DataPosition,
    capture_rng,
    latest_checkpoint,
    load_checkpoint,
    restore_rng,
    save_checkpoint,
)
from osmosis_trainer.loop._policy import attach_lora  # noqa: E402


class _Payload:
    """What a crafted checkpoint carries: unpickling it would run code (here: write a file)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:
        return (Path.write_text, (self.marker, "pwned"))


def _save(tiny_loaded: Any, root: Path, step: int) -> Path:
    model = attach_lora(copy.deepcopy(tiny_loaded.model), r=2, alpha=4, dropout=0.0,
                        target_modules=["q_proj"], seed=0)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-3)
    model(torch.tensor([[1, 2, 3]])).logits.sum().backward()
    opt.step()
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _s: 1.0)
    return save_checkpoint(root, step=step, model=model, optimizer=opt, scheduler=sched,
                           data=DataPosition(epoch=1, offset=3))


def test_a_crafted_state_file_is_refused_without_running_it(tiny_loaded: Any, tmp_path: Path) -> None:
    ckpt = _save(tiny_loaded, tmp_path / "checkpoints", 1)
    marker = tmp_path / "marker"
    torch.save({"step": 1, "evil": _Payload(marker)}, ckpt / "trainer_state.pt")
    with pytest.raises(TrainingError, match="not a plain-data checkpoint"):
        load_checkpoint(ckpt)
    assert not marker.exists()


def test_state_round_trips_as_plain_data_and_rng_resumes(tiny_loaded: Any, tmp_path: Path) -> None:
    import numpy as np

    ckpt = _save(tiny_loaded, tmp_path / "checkpoints", 2)
    torch.load(ckpt / "trainer_state.pt", weights_only=True)  # plain data all the way down
    state = load_checkpoint(ckpt)
    assert state.step == 2 and state.data == DataPosition(epoch=1, offset=3)
    assert state.optimizer["state"]  # Adam moments survived
    rng = capture_rng()
    expected = (random.random(), np.random.rand(), torch.rand(1).item())
    restore_rng(rng)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected


def test_latest_pointer_cannot_lead_outside_checkpoints(tiny_loaded: Any, tmp_path: Path) -> None:
    outside = _save(tiny_loaded, tmp_path / "elsewhere", 9)
    root = tmp_path / "run" / "checkpoints"
    inside = _save(tiny_loaded, root, 1)
    for pointer in ("../../elsewhere/step_000009", str(outside), "step_1/../../../elsewhere"):
        (root / "latest").write_text(pointer + "\n")
        assert latest_checkpoint(root) == inside
