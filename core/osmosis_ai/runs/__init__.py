"""The run store: one folder per training run, written by the worker, read by the CLI.

Torch-free. The trainer's worker writes through :class:`RunDir`; ``osmosis train
list/info/logs/stop/resume``, the dashboard and ``osmosis model`` read through
:func:`list_runs` / :func:`find_run` (each a :class:`RunRecord`, its liveness checked: a
worker that died silently shows as ``crashed``).
"""

from __future__ import annotations

from osmosis_ai.runs._hub import hf_cache_dir, is_hub_id, resolve_model_path
from osmosis_ai.runs._info import HELDOUT_FILE, describe_run
from osmosis_ai.runs._launch import (
    RunBusyError,
    busy_runs,
    check_capacity,
    launch_lock,
    spawn_worker,
)
from osmosis_ai.runs._pin import (
    CodePin,
    export_revision,
    pin_revision,
    pinned_path,
    verify_pinned_code,
)
from osmosis_ai.runs._process import process_alive
from osmosis_ai.runs._read import (
    CheckpointInfo,
    RunNotFoundError,
    RunRecord,
    find_run,
    list_checkpoints,
    list_runs,
    load_run,
    read_metrics,
    wait_for_status,
)
from osmosis_ai.runs._resume import confined_path_errors, resume_secrets
from osmosis_ai.runs._root import runs_root_for, workspace_root_here, workspace_runs_root
from osmosis_ai.runs._secrets import (
    ENVIRON_PREFIX,
    SECRETS_FLAG,
    apply_secrets,
    encode_secrets,
    snapshot_secrets,
    take_environ,
    take_secrets,
)
from osmosis_ai.runs._store import (
    PHASES,
    STATUSES,
    TERMINAL_STATUSES,
    Phase,
    RunDir,
    RunStatus,
    create_run_dir,
    read_status,
)
from osmosis_ai.runs._traces import (
    TRACES_DIR,
    TraceRecord,
    TraceSequence,
    read_trace_step,
    trace_file,
    trace_files,
)

__all__ = [
    "ENVIRON_PREFIX",
    "HELDOUT_FILE",
    "PHASES",
    "STATUSES",
    "TERMINAL_STATUSES",
    "TRACES_DIR",
    "CheckpointInfo",
    "CodePin",
    "Phase",
    "RunDir",
    "RunBusyError",
    "RunNotFoundError",
    "RunRecord",
    "RunStatus",
    "TraceRecord",
    "TraceSequence",
    "SECRETS_FLAG",
    "apply_secrets",
    "busy_runs",
    "check_capacity",
    "confined_path_errors",
    "create_run_dir",
    "describe_run",
    "encode_secrets",
    "export_revision",
    "find_run",
    "hf_cache_dir",
    "is_hub_id",
    "launch_lock",
    "list_checkpoints",
    "list_runs",
    "load_run",
    "pin_revision",
    "pinned_path",
    "process_alive",
    "read_metrics",
    "read_status",
    "read_trace_step",
    "resolve_model_path",
    "resume_secrets",
    "runs_root_for",
    "snapshot_secrets",
    "spawn_worker",
    "take_environ",
    "take_secrets",
    "trace_file",
    "trace_files",
    "verify_pinned_code",
    "wait_for_status",
    "workspace_root_here",
    "workspace_runs_root",
]
