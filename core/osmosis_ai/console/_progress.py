"""How ``osmosis train`` shows a run's progress: a live view on a terminal, one plain line
per step in a log or a pipe (the worker writes the latter into ``<run>/train.log``)."""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

from osmosis_ai.console._output import state

if TYPE_CHECKING:
    from rich.console import RenderableType

__all__ = ["LineView", "LiveView", "ascii_chart", "line_view", "sparkline"]

_BARS = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float], *, lo: float | None = None, hi: float | None = None) -> str:
    """One character per value, scaled between ``lo`` and ``hi`` (default: the data range)."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return ""
    lo = min(finite) if lo is None else lo
    hi = max(finite) if hi is None else hi
    span = hi - lo
    out = []
    for v in values:
        if not math.isfinite(v):
            out.append(" ")
            continue
        frac = 0.5 if span <= 0 else min(max((v - lo) / span, 0.0), 1.0)
        out.append(_BARS[round(frac * (len(_BARS) - 1))])
    return "".join(out)


def ascii_chart(values: list[float], *, height: int = 8, label: str = "reward") -> str:
    """A small multi-line plot of ``values`` (one column per step) with a y axis."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return f"{label}: no data"
    lo, hi = min(0.0, min(finite)), max(1.0, max(finite))
    labels = {height: hi, (height + 1) // 2: (lo + hi) / 2, 1: lo}
    rows = []
    for level in range(height, 0, -1):
        top = lo + (hi - lo) * level / height
        bottom = lo + (hi - lo) * (level - 1) / height
        cells = "".join(
            "█"
            if math.isfinite(v) and v >= top
            else ("▄" if math.isfinite(v) and v > bottom else " ")
            for v in values
        )
        axis = f"{labels[level]:6.2f} ┤" if level in labels else "       │"
        rows.append(axis + cells)
    rows.append("       └" + "─" * len(values) + f"  {label} per step (1..{len(values)})")
    return "\n".join(rows)


def _fmt(metrics: dict[str, Any], key: str, spec: str = ".3f") -> str:
    value = metrics.get(key)
    if not isinstance(value, int | float) or not math.isfinite(value):
        return "-"
    return format(value, spec)


def _reasons(metrics: dict[str, Any]) -> str:
    parts = [
        f"{k.removeprefix('failed/')} {v:.0f}"
        for k, v in metrics.items()
        if k.startswith("failed/") and isinstance(v, int | float) and v
    ]
    return f" ({', '.join(parts)})" if parts else ""


class LiveView:
    """Progress bar + reward sparkline + last-step metrics, redrawn on every report."""

    def __init__(self, total_steps: int, start_step: int = 0) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.progress = Progress(
            TextColumn("[bold]training[/]"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("steps"),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=state.console,
        )
        self.task = self.progress.add_task("train", total=max(total_steps, 1), completed=start_step)
        self.rewards: list[float] = []
        self.val: list[float] = []
        self.last: dict[str, Any] = {}
        self.phase = "starting"

    def set_total(self, total_steps: int, start_step: int = 0) -> None:
        self.progress.update(self.task, total=max(total_steps, 1), completed=start_step)

    def on_phase(self, text: str) -> None:
        self.phase = text

    def on_report(self, report: Any) -> None:
        if report.kind == "warm_start":
            m = report.metrics
            self.phase = (
                f"warm start {report.step}/{report.total_steps}: loss "
                f"{_fmt(m, 'warm_start/loss', '.4f')} token accuracy "
                f"{_fmt(m, 'warm_start/token_accuracy', '.0%')}"
            )
            return
        if report.kind == "eval":
            self.val.append(float(report.metrics.get("val_reward_mean", math.nan)))
            return
        self.last = report.metrics
        self.rewards.append(float(report.metrics.get("reward_mean", math.nan)))
        self.progress.update(self.task, completed=report.step)
        self.phase = "training"

    def __rich__(self) -> RenderableType:
        from rich.console import Group
        from rich.text import Text

        m = self.last
        lines: list[RenderableType] = [self.progress]
        if self.rewards:
            lines.append(
                Text.assemble(
                    ("reward ", "bold"),
                    (sparkline(self.rewards, lo=0.0, hi=1.0), "green"),
                    f"  last {_fmt(m, 'reward_mean')}  pass {_fmt(m, 'pass_rate', '.0%')}",
                )
            )
            lines.append(
                Text(
                    f"loss {_fmt(m, 'loss', '.4f')}  entropy {_fmt(m, 'entropy', '.2f')}  "
                    f"kl {_fmt(m, 'kl', '.4f')}  len {_fmt(m, 'response_length', '.0f')}  "
                    f"step {_fmt(m, 'step_time_s', '.0f')}s\n"
                    f"rollouts {_fmt(m, 'rollouts', '.0f')}  failed "
                    f"{_fmt(m, 'failed_rollouts', '.0f')}{_reasons(m)}  zero-variance groups "
                    f"{_fmt(m, 'zero_variance_groups', '.0f')}/{_fmt(m, 'groups', '.0f')}",
                    style="dim",
                )
            )
        if self.val:
            lines.append(
                Text(
                    f"validation reward {sparkline(self.val, lo=0.0, hi=1.0)} "
                    f"last {self.val[-1]:.3f}"
                )
            )
        lines.append(Text(f"[{self.phase}]", style="dim"))
        return Group(*lines)


class LineView:
    """One plain line per step and per setup phase, for logs and pipes (no terminal to redraw)."""

    def __init__(self, total_steps: int) -> None:
        self.total = total_steps
        self.started = time.perf_counter()
        self.rewards: list[float] = []

    def set_total(self, total_steps: int, start_step: int = 0) -> None:
        self.total = total_steps

    def on_phase(self, text: str) -> None:
        state.console.print(
            f"[{_clock(self.started)}] {text}", highlight=False, soft_wrap=True, markup=False
        )

    def on_report(self, report: Any) -> None:
        m = report.metrics
        if report.kind == "warm_start":
            line = (
                f"warm start {report.step}/{report.total_steps} (epoch "
                f"{_fmt(m, 'warm_start/epoch', '.0f')}): loss {_fmt(m, 'warm_start/loss', '.4f')} "
                f"token accuracy {_fmt(m, 'warm_start/token_accuracy', '.0%')} tokens "
                f"{_fmt(m, 'warm_start/tokens', '.0f')}"
            )
        elif report.kind == "eval":
            line = (
                f"validation step {report.step}: reward {_fmt(m, 'val_reward_mean')} "
                f"pass {_fmt(m, 'val_pass_rate', '.0%')}"
            )
        else:
            self.rewards.append(float(m.get("reward_mean", math.nan)))
            done = report.step / max(report.total_steps, 1)
            line = (
                f"step {report.step}/{report.total_steps} ({done:.0%}) reward "
                f"{_fmt(m, 'reward_mean')} {sparkline(self.rewards, lo=0.0, hi=1.0)} pass "
                f"{_fmt(m, 'pass_rate', '.0%')} loss {_fmt(m, 'loss', '.4f')} len "
                f"{_fmt(m, 'response_length', '.0f')} failed {_fmt(m, 'failed_rollouts', '.0f')}/"
                f"{_fmt(m, 'rollouts', '.0f')}{_reasons(m)} step {_fmt(m, 'step_time_s', '.0f')}s"
            )
        state.console.print(
            f"[{_clock(self.started)}] {line}", highlight=False, soft_wrap=True, markup=False
        )


def _clock(started: float) -> str:
    seconds = int(time.perf_counter() - started)
    return f"{seconds // 60:02d}:{seconds % 60:02d}"


def line_view(total_steps: int) -> LineView:
    """The plain-line progress printer (``on_report``/``on_phase`` callbacks of a run)."""
    return LineView(total_steps)
