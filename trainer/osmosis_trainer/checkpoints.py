"""Training checkpoints: a PEFT adapter plus everything needed to resume, written atomically.

Layout of one checkpoint (``<run>/checkpoints/step_000020/``)::

    adapter/                 adapter_config.json + adapter_model.safetensors (standard PEFT:
                             PeftModel.from_pretrained(base, path) and vLLM --lora-modules load it)
    trainer_state.pt         optimizer, scheduler, RNG states, data position
    checkpoint.json          step, policy version, data position, metrics of that step, time

The warm start's checkpoint (``[warm_start]``) is ``<run>/checkpoints/warm/``, laid out the same
(step 0: the adapter RL starts from, with RL's fresh optimizer state); ``latest`` never names it.

A checkpoint is written into a hidden temporary folder and renamed into place, then the
``latest`` pointer file is replaced: a crash never leaves a half-written checkpoint behind.

Checkpoints are data, never code: ``trainer_state.pt`` holds only tensors, numbers, strings
and containers (RNG states included) and is read with ``torch.load(weights_only=True)``, so a
crafted file cannot run anything on resume; ``latest`` may only name a ``step_*`` folder
next to it.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from osmosis_ai.errors import TrainingError, UnreadableFileError
from osmosis_ai.safe_io import read_json_object, read_text

__all__ = [
    "CheckpointState",
    "DataPosition",
    "capture_rng",
    "latest_checkpoint",
    "list_checkpoints",
    "load_checkpoint",
    "restore_rng",
    "save_adapter",
    "save_checkpoint",
    "warm_checkpoint",
]

_LATEST = "latest"
_STATE = "trainer_state.pt"
_META = "checkpoint.json"
WARM = "warm"
"""The warm start's checkpoint folder under ``checkpoints/``."""


@dataclass(frozen=True)
class DataPosition:
    """Where the data cursor stands: ``epoch`` and the next row within that epoch's order."""

    epoch: int = 0
    offset: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "offset": self.offset}


@dataclass
class CheckpointState:
    """What :func:`load_checkpoint` returns (the adapter is loaded separately into the model)."""

    path: Path
    step: int
    data: DataPosition
    optimizer: dict[str, Any]
    scheduler: dict[str, Any]
    rng: dict[str, Any]
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def adapter_dir(self) -> Path:
        return self.path / "adapter"


def capture_rng() -> dict[str, Any]:
    """The states of Python's, NumPy's and torch's (CPU and CUDA) random generators, as plain
    tensors, numbers and tuples (loadable with ``torch.load(weights_only=True)``)."""
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    try:
        import numpy as np

        name, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
        state["numpy"] = (
            str(name), torch.from_numpy(np.asarray(keys).astype(np.int64)), int(pos),
            int(has_gauss), float(cached),
        )
    except ImportError:  # pragma: no cover - numpy ships with the trainer extra
        pass
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    """Restore what :func:`capture_rng` captured."""
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "numpy" in state:
        import numpy as np

        name, keys, pos, has_gauss, cached = state["numpy"]
        np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _fsync_tree(root: Path) -> None:
    for path in sorted(root.rglob("*")):
        if path.is_file():
            with open(path, "rb") as fh:
                os.fsync(fh.fileno())


def _write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _save_pretrained(model: Any, folder: Path) -> None:
    """Write the active LoRA adapter in standard PEFT format (``adapter_config.json`` +
    ``adapter_model.safetensors``), loadable by ``PeftModel.from_pretrained`` and vLLM.

    peft's own ``save_pretrained``; ``save_embedding_layers`` is given explicitly because its
    ``"auto"`` looks the base model up on the Hub (the embedded GGUF model is not there).
    """
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(
        str(folder), safe_serialization=True, save_embedding_layers=_embeddings_targeted(model)
    )


def _embeddings_targeted(model: Any) -> bool:
    """Whether the adapter adapts an embedding or the output head (their weights are saved too)."""
    for name, module in model.named_modules():
        if hasattr(module, "lora_A") or hasattr(module, "lora_embedding_A"):
            base = getattr(module, "base_layer", module)
            if isinstance(base, torch.nn.Embedding) or name.endswith("lm_head"):
                return True
    return False


def save_adapter(model: Any, directory: Path, *, durable: bool = True) -> Path:
    """Save the model's LoRA adapter in standard PEFT format into ``directory`` atomically.

    ``durable=False`` skips the fsync: for adapters read at once and never needed after a
    crash (the per-step copy the engine loads).
    """
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = directory.with_name(f".{directory.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    _save_pretrained(model, tmp)
    if durable:
        _fsync_tree(tmp)
    if directory.exists():
        shutil.rmtree(directory)
    os.replace(tmp, directory)
    return directory


def save_checkpoint(
    checkpoints_dir: Path,
    *,
    step: int,
    model: Any,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    data: DataPosition,
    meta: dict[str, Any] | None = None,
    name: str | None = None,
) -> Path:
    """Write checkpoint ``step_<step>`` under ``checkpoints_dir`` and point ``latest`` at it.

    ``name`` (e.g. :data:`WARM`) writes a folder of that name instead, and leaves ``latest``
    as it is.
    """
    checkpoints_dir = Path(checkpoints_dir)
    checkpoints_dir.mkdir(parents=True, exist_ok=True)
    folder = name or f"step_{step:06d}"
    final = checkpoints_dir / folder
    tmp = checkpoints_dir / f".{folder}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    _save_pretrained(model, tmp / "adapter")
    torch.save(
        {
            "step": step,
            "data": data.as_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "rng": capture_rng(),
        },
        tmp / _STATE,
    )
    info = {"step": step, "data": data.as_dict(), "saved_at": time.time(), **(meta or {})}
    (tmp / _META).write_text(json.dumps(info, indent=2, default=str))
    _fsync_tree(tmp)
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    if name is None:
        _write_text_atomic(checkpoints_dir / _LATEST, final.name + "\n")
    return final


def warm_checkpoint(checkpoints_dir: Path) -> Path | None:
    """The complete warm-start checkpoint under ``checkpoints_dir``, or ``None``."""
    path = Path(checkpoints_dir) / WARM
    return path if (path / _STATE).is_file() else None


def list_checkpoints(checkpoints_dir: Path) -> list[Path]:
    """Complete checkpoints under ``checkpoints_dir``, oldest first."""
    root = Path(checkpoints_dir)
    if not root.is_dir():
        return []
    found = [
        p for p in root.iterdir()
        if p.is_dir() and p.name.startswith("step_") and (p / _STATE).exists()
    ]
    return sorted(found, key=lambda p: p.name)


def latest_checkpoint(checkpoints_dir: Path) -> Path | None:
    """The checkpoint named by ``latest`` (or the newest complete one), or ``None``."""
    root = Path(checkpoints_dir)
    try:  # a regular file of a few bytes (safe_io): a FIFO or link is no pointer
        name = read_text(root / _LATEST, under=root, max_bytes=4096).strip()
    except UnreadableFileError:
        name = ""
    # Only a checkpoint folder next to the pointer: never a path that leads elsewhere.
    if _is_step_name(name) and (root / name / _STATE).exists():
        return root / name
    found = list_checkpoints(root)
    return found[-1] if found else None


def _is_step_name(name: str) -> bool:
    return name.startswith("step_") and name[5:].isdigit() and name[5:].isascii()


def load_checkpoint(path: Path) -> CheckpointState:
    """Read a checkpoint folder written by :func:`save_checkpoint`."""
    path = Path(path)
    state_file = path / _STATE
    if not state_file.exists():
        raise TrainingError(
            f"{path} is not a complete checkpoint ({_STATE} is missing); pick another one under "
            f"{path.parent}"
        )
    # Data only: a crafted trainer_state.pt must not run code (torch's full unpickler would).
    try:
        raw = torch.load(state_file, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise TrainingError(
            f"{state_file} is not a plain-data checkpoint and is not loaded ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}). It was written by another program "
            "or an older osmosis; resume from another checkpoint or start a new run."
        ) from None
    try:
        meta = read_json_object(path / _META, under=path)
    except UnreadableFileError as exc:
        if not exc.missing:
            raise TrainingError(f"{exc}; resume from another checkpoint") from None
        meta = {}
    return CheckpointState(
        path=path,
        step=int(raw["step"]),
        data=DataPosition(**raw["data"]),
        optimizer=raw["optimizer"],
        scheduler=raw["scheduler"],
        rng=raw["rng"],
        meta=meta,
    )
