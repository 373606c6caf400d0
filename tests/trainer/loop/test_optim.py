"""The learning-rate schedule: torch's schedulers draw the documented warm-up + decay curve."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from osmosis_ai.config import LRSchedule
from osmosis_trainer.loop._optim import build_scheduler


def _expected(step: int, warmup: int, total: int, schedule: LRSchedule) -> float:
    """The curve as documented: (step+1)/(warmup+1) while warming up, then the decay."""
    if step < warmup:
        return (step + 1) / (warmup + 1)
    progress = (step - warmup) / max(total - warmup, 1)
    if schedule == "linear":
        return 1.0 - progress
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    return 1.0


def _optimizer(lr: float = 0.5) -> torch.optim.Optimizer:
    return torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], lr=lr)


@pytest.mark.parametrize("schedule", ["constant", "linear", "cosine"])
@pytest.mark.parametrize(("warmup", "total"), [(0, 8), (2, 6), (3, 10), (1, 2), (5, 3)])
def test_curve_over_the_run(schedule: LRSchedule, warmup: int, total: int) -> None:
    opt = _optimizer()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no deprecation or call-order warnings from torch
        sched = build_scheduler(opt, warmup_steps=warmup, total_steps=total, schedule=schedule)
        got = []
        for _ in range(total):  # the loop reads the rate, trains, then steps the schedule
            got.append(sched.get_last_lr()[0] / 0.5)
            opt.step()
            sched.step()
    want = [_expected(s, warmup, total, schedule) for s in range(total)]
    assert got == pytest.approx(want, abs=1e-12)


def test_steps_without_an_update_still_advance() -> None:
    opt = _optimizer()
    sched = build_scheduler(opt, warmup_steps=1, total_steps=4, schedule="linear")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch notes the missing optimizer.step()
        sched.step()  # a step whose groups all had zero variance: no optimizer step
    assert sched.get_last_lr()[0] == pytest.approx(0.5)


@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_resume_continues_the_curve(schedule: LRSchedule) -> None:
    opt = _optimizer()
    sched = build_scheduler(opt, warmup_steps=2, total_steps=9, schedule=schedule)
    for _ in range(4):
        opt.step()
        sched.step()
    state_opt, state_sched = opt.state_dict(), sched.state_dict()
    rest = []
    for _ in range(5):
        rest.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()

    opt2 = _optimizer()
    sched2 = build_scheduler(opt2, warmup_steps=2, total_steps=9, schedule=schedule)
    opt2.load_state_dict(state_opt)
    sched2.load_state_dict(state_sched)
    resumed = []
    for _ in range(5):
        resumed.append(sched2.get_last_lr()[0])
        opt2.step()
        sched2.step()
    assert resumed == rest


def test_unknown_schedule() -> None:
    with pytest.raises(ValueError, match="constant, linear or cosine"):
        build_scheduler(_optimizer(), warmup_steps=0, total_steps=3, schedule="step")  # type: ignore[arg-type]
