"""How eval results look on the terminal: the summary table, the paired comparison and the
live progress bar. Shared by ``eval run``/``eval info`` and ``eval rubric`` (which prints the same
summary), so neither command module imports the other."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from osmosis_ai.console import state

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from osmosis_ai.eval import (
        EvalEvents,
        EvalPlan,
        EvalRecord,
        EvalResult,
        EvalSummary,
        PairedResult,
    )

__all__ = [
    "Head",
    "ProgressView",
    "RunHead",
    "fmt",
    "fmt_cmp",
    "make_progress",
    "print_results",
    "print_summary",
    "progress_events",
    "report_paired",
    "report_single",
    "signed",
]


def fmt(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def signed(x: float | None) -> str:
    return "-" if x is None else f"{x:+.3f}"


def fmt_cmp(cmp: dict[str, Any] | None) -> str:
    if not cmp or cmp.get("diff") is None:
        return "-"
    return f"{cmp['diff']:+.3f} [{cmp['ci_low']:+.3f}, {cmp['ci_high']:+.3f}]"


class RunHead(Protocol):
    """What the summary header names: an :class:`EvalPlan`, or an eval run read back."""

    @property
    def config_name(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def n(self) -> int: ...
    @property
    def run_dir(self) -> Path: ...


@dataclass
class Head:
    config_name: str
    model: str
    n: int
    run_dir: Path


def print_summary(
    plan: RunHead, summary: EvalSummary, status: str, load_s: float | None = None
) -> None:
    from rich.markup import escape
    from rich.table import Table

    console = state.console
    wall = f" in {summary.wall_time_s:.1f} s" if summary.wall_time_s is not None else ""
    if load_s is not None:
        wall += f" (+ {load_s:.1f} s model start)"
    console.print(
        f"[bold]eval {escape(plan.config_name)}[/]: {summary.samples} samples, model "
        f"{escape(plan.model)}, n={plan.n}{wall} ([bold]{escape(status)}[/])"
    )
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="cyan", no_wrap=True)
    table.add_column(overflow="fold")
    r = summary.reward
    table.add_row(
        "reward",
        f"mean {fmt(r.mean)}  median {fmt(r.median)}  std {fmt(r.std)}  "
        f"min {fmt(r.min)}  max {fmt(r.max)}  ({r.count} graded)",
    )
    considered = summary.success + summary.failed
    rate = "-" if summary.pass_rate is None else f"{summary.pass_rate * 100:.1f}%"
    table.add_row(
        f"pass rate (reward >= {summary.pass_threshold:g})",
        f"{rate} ({summary.passed}/{considered}; failed samples count as not passed)",
    )
    for k, v in summary.pass_at_k.items():
        table.add_row(escape(k), f"{v:.3f} (unbiased, over {summary.pass_at_k_groups} rows)")
    table.add_row(
        "samples",
        f"{summary.success} success, {summary.failed} failed, {summary.skipped} skipped",
    )
    if summary.failures_by_reason:
        reasons = ", ".join(f"{k} {v}" for k, v in summary.failures_by_reason.items())
        table.add_row("failures", escape(reasons))
        for reason, example in summary.failure_examples.items():
            table.add_row(f"  e.g. {escape(reason)}", escape(example))
    per = fmt(summary.tokens_per_sample, 1)
    table.add_row(
        "tokens",
        f"{summary.prompt_tokens} prompt + {summary.completion_tokens} completion "
        f"({per} per sample)",
    )
    if summary.judge:
        j = summary.judge
        table.add_row(
            "judge",
            f"{j.get('calls', 0):.0f} calls, {j.get('cache_hits', 0):.0f} cache hits, "
            f"{j.get('prompt_tokens', 0):.0f} prompt + {j.get('completion_tokens', 0):.0f} "
            f"completion tokens, cost ${j.get('cost_usd', 0):.4f}",
        )
    if summary.latency_ms:
        lat = summary.latency_ms
        table.add_row(
            "latency",
            f"mean {lat['mean'] / 1000:.2f} s  p50 {lat['p50'] / 1000:.2f} s  "
            f"p95 {lat['p95'] / 1000:.2f} s  max {lat['max'] / 1000:.2f} s",
        )
    table.add_row("results", escape(f"{plan.run_dir / 'results.jsonl'} (traces in traces/)"))
    console.print(table)


def print_results(rows: list[dict[str, Any]], run_dir: Path) -> None:
    """The first 20 per-row results of an eval run as a table (the rest are in the run)."""
    if not rows:
        return
    from rich.markup import escape
    from rich.table import Table

    table = Table(box=None, pad_edge=False, title="results (first 20)")
    for col in ("row", "run", "status", "reward", "error"):
        table.add_column(col, overflow="fold")
    for r in rows[:20]:
        table.add_row(
            str(r["row_index"]),
            str(r["run_index"]),
            r["status"],
            fmt(r["reward"]),
            escape((r.get("error") or "")[:80]),
        )
    state.console.print(table)
    if len(rows) > 20:
        state.console.print(f"  ... {len(rows) - 20} more in {run_dir / 'results.jsonl'}")


def report_single(result: EvalResult, json_out: bool) -> None:
    """One model's eval: its summary as JSON, or the resumed counts and the summary table."""
    status = result.info.status
    if json_out:
        state.emit_json(
            {
                "run_dir": str(result.plan.run_dir),
                "status": status,
                "model": result.plan.model,
                "model_load_s": result.info.model_load_s,
                "new_records": result.new_records,
                "resumed_records": result.resumed_records,
                "summary": result.summary.model_dump(mode="json"),
            }
        )
        return
    if result.resumed_records:
        state.console.print(
            f"resumed: kept {result.resumed_records} earlier results, ran {result.new_records} more"
        )
    print_summary(result.plan, result.summary, status, result.info.model_load_s)


def report_paired(paired: PairedResult, json_out: bool) -> None:
    from rich.markup import escape

    cand, base, cmp = paired.candidate, paired.baseline, paired.comparison
    if json_out:
        state.emit_json(
            {
                "run_dir": str(cand.plan.run_dir),
                "status": cand.info.status,
                "model": cand.plan.model,
                "baseline": base.plan.model,
                "summary": cand.summary.model_dump(mode="json"),
                "baseline_summary": base.summary.model_dump(mode="json"),
                "comparison": cmp.model_dump(mode="json") | {"verdict": cmp.verdict},
            }
        )
        return
    print_summary(cand.plan, cand.summary, cand.info.status, cand.info.model_load_s)
    state.console.print()
    print_summary(base.plan, base.summary, base.info.status, base.info.model_load_s)
    state.console.print()
    pct = f"{cmp.confidence * 100:g}%"
    state.console.print(
        f"[bold]compared[/] on {cmp.rows} rows (same rows, n={cand.plan.n}): "
        f"{escape(cmp.candidate)} vs {escape(cmp.baseline)}"
    )
    state.console.print(
        f"  reward  model {fmt(cmp.candidate_mean)}  baseline {fmt(cmp.baseline_mean)}  "
        f"diff {signed(cmp.diff)}  {pct} CI [{signed(cmp.ci_low)}, {signed(cmp.ci_high)}]"
        f"  -> [bold]{escape(cmp.verdict)}[/]"
    )
    notes = []
    if cmp.unpaired_rows:
        notes.append(f"{cmp.unpaired_rows} rows left out (no graded sample under one model)")
    if cmp.candidate_failed or cmp.baseline_failed:
        notes.append(
            f"failed samples: model {cmp.candidate_failed}, baseline {cmp.baseline_failed}"
        )
    notes.append(
        f"paired bootstrap over rows, {cmp.resamples} resamples, seed {cmp.seed}; "
        f"{cand.plan.run_dir / 'comparison.json'}"
    )
    for note in notes:
        state.console.print(f"  {note}", markup=False)


class ProgressView:
    """Feeds a rich progress bar (on stderr) from eval events."""

    def __init__(self, progress: Progress, label: str = "eval") -> None:
        self.progress = progress
        self.label = label
        self.task: TaskID | None = None
        self.items: set[tuple[int, int]] = set()
        self.rewards: list[float] = []
        self.failed = 0

    def on_start(self, total: int, done: int) -> None:
        self.task = self.progress.add_task(
            self.label, total=total, completed=done, mean="-", failed=0
        )

    def on_phase(self, phase: str) -> None:
        if self.task is not None:
            self.progress.update(
                self.task,
                description=f"{self.label} ({phase})" if phase != "running" else self.label,
            )

    def on_record(self, record: EvalRecord) -> None:
        if record.reward is not None:
            self.rewards.append(record.reward)
        if record.status == "failed":
            self.failed += 1
        key = (record.row_index, record.run_index)
        advance = 0 if key in self.items else 1
        self.items.add(key)
        mean = f"{sum(self.rewards) / len(self.rewards):.3f}" if self.rewards else "-"
        if self.task is not None:
            self.progress.update(self.task, advance=advance, mean=mean, failed=self.failed)


def make_progress(enabled: bool) -> Progress:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(
        SpinnerColumn(),
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("reward {task.fields[mean]}"),
        TextColumn("failed {task.fields[failed]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=state.err_console,
        transient=False,
        disable=not enabled,
    )


def progress_events(progress: Progress, label: str, holder: dict[str, Any]) -> EvalEvents:
    from osmosis_ai.eval import EvalEvents

    view = ProgressView(progress, label)

    def on_plan(plan: EvalPlan) -> None:
        holder["plan"] = plan
        for note in plan.notes:
            state.warn(note)

    return EvalEvents(
        on_plan=on_plan,
        on_start=view.on_start,
        on_record=view.on_record,
        on_phase=view.on_phase,
    )
