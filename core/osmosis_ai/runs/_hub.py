"""``model_path`` as a Hugging Face model id (``Qwen/Qwen2.5-0.5B-Instruct``).

The id is looked up in the local Hugging Face cache (``$HF_HUB_CACHE``, else
``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``), in its standard layout
``models--<org>--<name>/{refs/main, snapshots/<commit>/}``, without importing anything
heavy. When it is not cached and the machine may go online (``HF_HUB_OFFLINE`` unset and
``huggingface_hub`` installed), it is downloaded into that cache.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from osmosis_ai.errors import ConfigError
from osmosis_ai.safe_io import UnreadableFileError, read_text

__all__ = ["hf_cache_dir", "is_hub_id", "resolve_model_path"]

_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")


def hf_cache_dir() -> Path:
    """The Hugging Face hub cache folder, as ``huggingface_hub`` computes it."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return Path(os.environ[var]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface"
    )
    return Path(home).expanduser() / "hub"


def is_hub_id(model_path: str) -> bool:
    """``org/name`` that is not an existing local folder."""
    return bool(_HUB_ID.match(model_path)) and not Path(model_path).expanduser().exists()


def _cached(model_id: str, cache: Path) -> Path | None:
    repo = cache / f"models--{model_id.replace('/', '--')}"
    snapshots = repo / "snapshots"
    ref = repo / "refs" / "main"
    if ref.is_file():
        try:  # a commit hash; anything else in a cache someone else filled is ignored
            name = read_text(ref, under=cache, max_bytes=256).strip()
        except UnreadableFileError:
            name = ""
        snap = snapshots / name
        if name and "/" not in name and name not in (".", "..") and (snap / "config.json").is_file():
            return snap
    found = sorted(
        (p for p in snapshots.glob("*") if (p / "config.json").is_file()),
        key=lambda p: p.stat().st_mtime,
    ) if snapshots.is_dir() else []
    return found[-1] if found else None


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")


def resolve_model_path(model_path: str, *, download: bool = True) -> str:
    """The local folder for a Hub id (cached, or downloaded when allowed); any other
    ``model_path`` (``embedded``, a folder) is returned unchanged.

    Raises:
        ConfigError: a Hub id that is not cached and cannot be downloaded; the message names
            the id, the cache folder and how to get the model.
    """
    if not is_hub_id(model_path):
        return model_path
    cache = hf_cache_dir()
    hit = _cached(model_path, cache)
    if hit is not None:
        return str(hit)
    how = (
        f"download it on a machine that is online with 'huggingface-cli download {model_path}' "
        f"(the cache is {cache}; HF_HUB_CACHE picks another), or set model_path to a local "
        "model folder or 'embedded'"
    )
    if not download or _offline():
        raise ConfigError(
            f"[experiment].model_path = {model_path!r}: not in the Hugging Face cache and "
            f"this machine is offline (HF_HUB_OFFLINE); {how}"
        )
    try:
        from huggingface_hub import snapshot_download
    except ImportError as exc:
        raise ConfigError(
            f"[experiment].model_path = {model_path!r}: not in the Hugging Face cache, and "
            f"huggingface_hub (installed with the trainer extra) is missing; {how}"
        ) from exc
    try:
        return str(snapshot_download(model_path, cache_dir=str(cache)))
    except Exception as exc:  # network, auth, unknown repo: one clear line
        raise ConfigError(
            f"[experiment].model_path = {model_path!r}: not in the Hugging Face cache and the "
            f"download failed ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); "
            f"{how}"
        ) from exc
