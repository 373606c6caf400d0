"""Write one benchmark's section of BENCHMARKS.md, keeping the other sections as they are.

Every section's header records the machine it ran on (:func:`machine`): the CPU as
``/proc/cpuinfo`` names it (model name, family/model/stepping: "AMD EPYC" alone names several
generations), the flags that pick torch's CPU kernels, the core topology (two vCPUs on one
physical core share its vector units), the load average while it ran, and the torch version.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
import platform
import re
import statistics
import subprocess
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = [
    "cpu_info",
    "cpu_short",
    "load_average",
    "load_note",
    "machine",
    "spread",
    "write_section",
]

ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "BENCHMARKS.md"
_HEADER = (
    "# Benchmarks\n\nEach section is written by `nox -s bench` (or the command it names) and "
    "records the machine and the command that produced it.\n"
)
KEY_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16")
"""CPU flags that decide which oneDNN kernels torch runs (bf16 natively or emulated)."""


def _cpuinfo(text: str) -> dict[str, str]:
    """The first processor's ``key: value`` lines of ``/proc/cpuinfo``."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def _first_cpu(cpuinfo: str | None) -> dict[str, str] | None:
    """:func:`_cpuinfo` of ``cpuinfo``, or of ``/proc/cpuinfo`` (None where it cannot be read)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return None
    return _cpuinfo(cpuinfo)


def cpu_info(cpuinfo: str | None = None) -> str:
    """E.g. ``AMD EPYC (family 25 model 17 stepping 1; avx2 avx512f avx512_bf16; 2 vCPUs,
    1 thread per core)``."""
    f = _first_cpu(cpuinfo)
    if f is None:
        return platform.processor() or platform.machine()
    name = f.get("model name") or platform.processor() or platform.machine()
    flags = set(f.get("flags", "").split())
    has = [flag for flag in KEY_FLAGS if flag in flags] or ["none of " + "/".join(KEY_FLAGS)]
    siblings, cores = f.get("siblings"), f.get("cpu cores")
    smt = (
        f", {int(siblings) // int(cores)} thread(s) per core"
        if siblings and cores and siblings.isdigit() and cores.isdigit() and int(cores)
        else ""
    )
    return (
        f"{name} (family {f.get('cpu family', '?')} model {f.get('model', '?')} stepping "
        f"{f.get('stepping', '?')}; {' '.join(has)}; {os.cpu_count()} vCPUs{smt})"
    )


def cpu_short(cpuinfo: str | None = None) -> str:
    """The CPU in a table cell, e.g. ``Intel Xeon (6/207)`` (family/model): stored with each
    run, since runs made on different machines share one table."""
    f = _first_cpu(cpuinfo)
    if f is None:
        return platform.processor() or platform.machine()
    name = re.sub(r"\((R|TM)\)|\bProcessor\b|\bCPU\b", "", f.get("model name", ""))
    name = " ".join(name.split()[:3]) or platform.machine()
    return f"{name} ({f.get('cpu family', '?')}/{f.get('model', '?')})"


def behaviour_bytes(path: Path) -> bytes:
    """What of a file decides what a benchmark measures, for the fingerprints that mark stored
    results stale: Python as its syntax tree without docstrings or other bare strings, TOML as
    its parsed table (comments dropped from both), any other file as is. Fixing a comment then
    leaves hours of stored learning runs current; changing one setting or statement does not.
    (Syntax trees differ between Python minors: compare fingerprints made on one machine.)"""
    return behaviour(path.name, path.read_bytes())


def behaviour(name: str, data: bytes) -> bytes:
    """:func:`behaviour_bytes` of the content ``data`` of a file called ``name``."""
    return _behaviour(Path(name).suffix, data)


# Cached: a render checks each stored run against today's stamps, and parsing the trainer's
# ~200 files for each check took most of a minute.
@functools.cache
def _behaviour(suffix: str, data: bytes) -> bytes:
    try:
        if suffix == ".py":
            tree = ast.parse(data)
            for node in ast.walk(tree):
                for field in ("body", "orelse", "finalbody"):
                    body = getattr(node, field, None)
                    if isinstance(body, list):
                        body[:] = [n for n in body if not _bare_string(n)]
            return ast.dump(tree).encode()
        if suffix == ".toml":
            import tomllib

            return json.dumps(tomllib.loads(data.decode()), sort_keys=True, default=str).encode()
    except (SyntaxError, ValueError):  # not parseable (a template placeholder): as is
        pass
    return data


NOT_IN_LEARNING_RUNS = ("distributed",)
"""Trainer packages a learning run never imports (they load only with ``[cluster]``): a change
there leaves what the runs measured as it was."""


def template_digest(template: str) -> hashlib._Hash:
    """sha256 over a template's files and the trainer's (but :data:`NOT_IN_LEARNING_RUNS`) and
    eval package's Python source (each file's name and :func:`behaviour_bytes`): what a
    learning run of that template ran."""
    files = sorted((ROOT / "templates" / template).iterdir())
    trainer = ROOT / "trainer" / "osmosis_trainer"
    files += sorted(p for p in trainer.rglob("*.py")
                    if p.relative_to(trainer).parts[0] not in NOT_IN_LEARNING_RUNS)
    files += sorted((ROOT / "core" / "osmosis_ai" / "eval").rglob("*.py"))
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + behaviour_bytes(path))
    return digest


PRECISIONS = ("float32", "bfloat16")
"""What ``[training] dtype = "auto"`` trains in on a CPU (bf16 where its matmuls are faster)."""


def code_stamp(template: str) -> str:
    """A learning run's code alone (:func:`template_digest`, no precision): runs of one code in
    both precisions share it, so a stale render can keep them together."""
    return template_digest(template).hexdigest()[:16]


def code_of(record: Mapping[str, Any]) -> str | None:
    """The code a stored learning record ran: its ``code`` stamp, or for records stored before
    the code was kept apart, its ``template`` stamp (code and precision hashed together)."""
    return record.get("code") or record.get("template")


def backfill_code(records: list[dict[str, Any]], template: str) -> bool:
    """Give each record of today's code stored without its ``code`` stamp (its ``template``
    stamp is one of :func:`head_fingerprints`) that stamp, so it stays with its code once the
    code moves on. Whether any record changed (the caller then writes them back)."""
    head, code, changed = head_fingerprints(template), code_stamp(template), False
    for record in records:
        if not record.get("code") and record.get("template") in head:
            record["code"], changed = code, True
    return changed


def run_fingerprint(template: str, dtype: str) -> str:
    """A learning run's stamp: :func:`template_digest` and the precision it trained in."""
    digest = template_digest(template)
    digest.update(dtype.encode())
    return digest.hexdigest()[:16]


def head_fingerprints(template: str) -> frozenset[str]:
    """The stamps a run of today's code carries, in either precision: a run made on a CPU
    where ``auto`` picks the other one is as current (its precision is a column of its own),
    so the sections read the same wherever they are rendered."""
    return frozenset(run_fingerprint(template, dtype) for dtype in PRECISIONS)


def _bare_string(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def git(*args: str, root: Path = ROOT) -> str | None:
    """``git args`` run in ``root``: its output, or None when git is missing or fails (a copy
    of the repository without its history still renders)."""
    try:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
    except OSError:
        return None
    return done.stdout if done.returncode == 0 else None


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.1f} / {five:.1f} / {fifteen:.1f} (1 / 5 / 15 min) on {os.cpu_count()} vCPUs"


QUIET_LOAD = 0.5
"""A 1-minute load average under this when a benchmark starts: nothing else was running."""


def load_note(at_start: float, cores: int | None = None) -> str:
    """Whether other work ran beside a benchmark, read from the 1-minute load average taken
    before its own work began (the benchmark itself keeps the load near the core count)."""
    cores = cores or os.cpu_count() or 1
    load = f"1-minute load average {at_start:.1f} on {cores} cores when it started"
    if at_start < QUIET_LOAD:
        return f"Nothing else was running when this started ({load})."
    return (
        f"Other work was running when this started ({load}): compare the rows of this table "
        "with each other, not with other sections."
    )


def _torch() -> str:
    try:
        import torch
    except ImportError:
        return "torch not installed"
    text = f"torch {torch.__version__}"
    try:
        mkldnn = torch.backends.mkldnn
        if mkldnn.is_available():  # type: ignore[no-untyped-call]
            bf16 = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
            text += f" (oneDNN bf16 kernels: {'yes' if bf16 else 'no'})"
        if torch.cuda.is_available():
            text += f", GPU {torch.cuda.get_device_name(0)}"
    except (AttributeError, RuntimeError):
        pass
    return text


def machine() -> str:
    return (
        f"{cpu_info()}, {_torch()}, Python {sys.version.split()[0]}, "
        f"{platform.system()} {platform.release()}"
    )


def spread(values: Sequence[float], fmt: str = "{:.2f}") -> str:
    """``median [min-max]`` of a few runs (the median alone hides a noisy row)."""
    if not values:
        return "-"
    med = statistics.median(values)
    if len(values) == 1:
        return fmt.format(med)
    return f"{fmt.format(med)} [{fmt.format(min(values))}-{fmt.format(max(values))}]"


def write_section(
    name: str,
    title: str,
    body: str,
    command: str,
    *,
    load_at_start: str | None = None,
    machine_text: str | None = None,
    date: str | None = None,
) -> None:
    """Replace (or append) the section ``name`` of BENCHMARKS.md.

    ``load_at_start``: :func:`load_average` taken when the measurement began (the header shows
    it next to the load at the end). ``machine_text``: the machine the stored results came
    from, when the section is rendered elsewhere (the GPU check, stored results); then no load
    is shown. ``date``: when the stored results were measured (default: now).
    """
    text = REPORT.read_text() if REPORT.exists() else _HEADER
    stamp = date or datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    load = f"at start {load_at_start}; at end {load_average()}" if load_at_start else load_average()
    where = (
        f"- Machine: {machine_text}\n"
        if machine_text
        else f"- Machine: {machine()}\n- Load average: {load}\n"
    )
    section = (
        f"<!-- bench:{name} -->\n## {title}\n\n"
        f"{where}- Command: `{command}`\n"
        f"- Date: {stamp}\n\n"
        f"{body.strip()}\n<!-- /bench:{name} -->"
    )
    pattern = re.compile(
        rf"<!-- bench:{re.escape(name)} -->.*?<!-- /bench:{re.escape(name)} -->", re.S
    )
    text = (
        pattern.sub(lambda _m: section, text)
        if pattern.search(text)
        else text.rstrip() + "\n\n" + section + "\n"
    )
    REPORT.write_text(text)


README = REPORT.parent / "README.md"


def write_readme_block(name: str, body: str) -> None:
    """Replace what README.md holds between ``<!-- bench:NAME -->`` and ``<!-- /bench:NAME -->``
    with ``body``: figures the README quotes come from the generator, never a hand."""
    text = README.read_text()
    pattern = re.compile(
        rf"(<!-- bench:{re.escape(name)} -->\n).*?(<!-- /bench:{re.escape(name)} -->)", re.S
    )
    if not pattern.search(text):
        raise SystemExit(f"README.md has no '<!-- bench:{name} -->' block to write")
    README.write_text(pattern.sub(lambda m: m.group(1) + body.strip() + "\n" + m.group(2), text))


_OPENMP_SET: dict[str, str] = {}


def trainer_openmp() -> None:
    """This process's OpenMP waits as the training worker's (``osmosis_trainer._openmp``).

    Call it before torch loads. What it sets is left out of :func:`library_env`, so a library's
    own run (TRL) gets the environment its users have, not ours.
    """
    from osmosis_trainer._openmp import apply_openmp_defaults

    _OPENMP_SET.update(apply_openmp_defaults())


def library_env() -> dict[str, str]:
    """The environment for a library's run: this one without what :func:`trainer_openmp` set."""
    return {k: v for k, v in os.environ.items() if k not in _OPENMP_SET}


def openmp_note() -> str:
    """How the trainer's rows and the libraries' rows set OpenMP's waits (for a section)."""
    from osmosis_trainer._openmp import OPENMP_DEFAULTS

    ours = ", ".join(f"`{k}={os.environ.get(k, v)}`" for k, v in OPENMP_DEFAULTS.items())
    theirs = ", ".join(f"`{k}={v}`" for k, v in library_env().items() if k in OPENMP_DEFAULTS)
    return f"OpenMP: ours {ours} (the training worker's default); the libraries' runs " + (
        theirs + " (set by whoever ran the benchmark)"
        if theirs
        else "libgomp's defaults (none set)"
    )
