"""The converted-weights cache: built once, shared between processes, rebuilt when broken."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import stat
from pathlib import Path

import pytest

from osmosis_trainer import gguf_cache


def _write_build(log: Path):  # type: ignore[no-untyped-def]
    def build(folder: Path) -> None:
        with log.open("a") as f:
            f.write("built\n")
        (folder / "weights.bin").write_bytes(b"w" * 1000)
        (folder / "config.json").write_text("{}")

    return build


def _builds(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "model.gguf"
    path.write_bytes(b"gguf" * 100)
    return path


def test_second_call_reuses_the_build(tmp_path: Path, source: Path) -> None:
    log = tmp_path / "log"
    first = gguf_cache.cached_conversion(source, _write_build(log), root=tmp_path / "cache")
    second = gguf_cache.cached_conversion(source, _write_build(log), root=tmp_path / "cache")
    assert first == second
    assert _builds(log) == 1
    assert (first / "weights.bin").stat().st_size == 1000
    manifest = json.loads((first / "manifest.json").read_text())
    assert manifest["source_sha256"] == gguf_cache.file_sha256(source)


def test_a_truncated_file_is_detected_and_rebuilt(tmp_path: Path, source: Path) -> None:
    log = tmp_path / "log"
    folder = gguf_cache.cached_conversion(source, _write_build(log), root=tmp_path / "cache")
    (folder / "weights.bin").write_bytes(b"w" * 10)
    again = gguf_cache.cached_conversion(source, _write_build(log), root=tmp_path / "cache")
    assert _builds(log) == 2
    assert (again / "weights.bin").stat().st_size == 1000


def test_a_same_size_change_fails_its_hash_and_is_rebuilt(tmp_path: Path, source: Path) -> None:
    log = tmp_path / "log"
    folder = gguf_cache.cached_conversion(source, _write_build(log), root=tmp_path / "cache")
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["files"]["weights.bin"] == {
        "size": 1000,
        "sha256": gguf_cache.file_sha256(folder / "weights.bin"),
    }
    before = (folder / "weights.bin").stat()
    (folder / "weights.bin").write_bytes(b"x" * 1000)  # same size, other bytes
    os.utime(folder / "weights.bin", ns=(before.st_atime_ns, before.st_mtime_ns))  # same mtime
    again = gguf_cache.cached_conversion(source, _write_build(log), root=tmp_path / "cache")
    assert _builds(log) == 2
    assert (again / "weights.bin").read_bytes() == b"w" * 1000


def test_a_verified_folder_is_not_hashed_again_until_a_file_changes(
    tmp_path: Path, source: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "log"
    folder = gguf_cache.cached_conversion(source, _write_build(log), root=tmp_path / "cache")
    hashed: list[str] = []
    real = gguf_cache.file_sha256

    def counting(path: Path) -> str:
        hashed.append(path.name)
        return real(path)

    monkeypatch.setattr(gguf_cache, "file_sha256", counting)
    gguf_cache.cached_conversion(source, _write_build(log), root=tmp_path / "cache")
    assert hashed == []  # the build's own check is remembered
    (folder / "config.json").chmod(0o600)  # any change to a file moves its ctime
    gguf_cache.cached_conversion(source, _write_build(log), root=tmp_path / "cache")
    assert sorted(hashed) == ["config.json", "weights.bin"] and _builds(log) == 1


@pytest.mark.parametrize("mode", [0o777, 0o757])
def test_a_folder_others_can_write_is_refused(tmp_path: Path, source: Path, mode: int) -> None:
    log = tmp_path / "log"
    root = tmp_path / "cache"
    root.mkdir()
    root.chmod(mode)
    with pytest.raises(gguf_cache.UnsafeCacheError, match="chmod go-w") as info:
        gguf_cache.cached_conversion(source, _write_build(log), root=root)
    assert info.value.folder == root and str(root) in str(info.value)
    assert _builds(log) == 0
    root.chmod(0o700)
    folder = gguf_cache.cached_conversion(source, _write_build(log), root=root)
    folder.chmod(0o777)  # a planted or loosened model folder is refused too
    with pytest.raises(gguf_cache.UnsafeCacheError, match=str(folder)):
        gguf_cache.cached_conversion(source, _write_build(log), root=root)


def test_a_group_writable_folder_is_refused_unless_the_group_is_yours(
    tmp_path: Path, source: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "cache"
    root.mkdir()
    root.chmod(0o770)
    monkeypatch.setattr(gguf_cache, "_own_private_group", lambda gid: False)
    with pytest.raises(gguf_cache.UnsafeCacheError, match="writable by group"):
        gguf_cache.cached_conversion(source, _write_build(tmp_path / "log"), root=root)
    monkeypatch.setattr(gguf_cache, "_own_private_group", lambda gid: True)
    assert gguf_cache.cached_conversion(source, _write_build(tmp_path / "log"), root=root).is_dir()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder away needs root")
def test_a_folder_owned_by_someone_else_is_refused(tmp_path: Path, source: Path) -> None:
    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    os.chown(root, 54321, 54321)
    with pytest.raises(gguf_cache.UnsafeCacheError, match="belongs to uid 54321"):
        gguf_cache.cached_conversion(source, _write_build(tmp_path / "log"), root=root)


def test_new_cache_folders_are_private(tmp_path: Path, source: Path) -> None:
    root = tmp_path / "fresh" / "cache"
    folder = gguf_cache.cached_conversion(source, _write_build(tmp_path / "log"), root=root)
    for path in (root, root / "models", folder):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path


def test_the_embedded_model_skips_an_unsafe_cache_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from osmosis_trainer.models import _embedded_source

    root = tmp_path / "shared"
    root.mkdir()
    root.chmod(0o777)
    monkeypatch.setenv("OSMOSIS_CACHE_DIR", str(root))
    with caplog.at_level(logging.WARNING, logger="osmosis"):
        src, kwargs = _embedded_source()
    assert "gguf_file" in kwargs  # converted in memory, nothing read from the shared folder
    assert any("chmod go-w" in r.getMessage() for r in caplog.records)
    assert not (root / "models").exists()


def test_a_missing_manifest_or_other_format_is_rebuilt(tmp_path: Path, source: Path) -> None:
    log = tmp_path / "log"
    folder = gguf_cache.cached_conversion(source, _write_build(log), root=tmp_path / "cache")
    manifest = json.loads((folder / "manifest.json").read_text())
    (folder / "manifest.json").write_text(json.dumps({**manifest, "format": -1}))
    gguf_cache.cached_conversion(source, _write_build(log), root=tmp_path / "cache")
    (folder / "manifest.json").unlink()
    gguf_cache.cached_conversion(source, _write_build(log), root=tmp_path / "cache")
    assert _builds(log) == 3


def test_a_changed_source_gets_its_own_folder(tmp_path: Path, source: Path) -> None:
    log = tmp_path / "log"
    first = gguf_cache.cached_conversion(source, _write_build(log), root=tmp_path / "cache")
    source.write_bytes(b"other" * 100)
    second = gguf_cache.cached_conversion(source, _write_build(log), root=tmp_path / "cache")
    assert first != second
    assert _builds(log) == 2


def test_a_failed_build_leaves_nothing_behind(tmp_path: Path, source: Path) -> None:
    def broken(folder: Path) -> None:
        (folder / "half.bin").write_bytes(b"x")
        raise RuntimeError("conversion failed")

    with pytest.raises(RuntimeError):
        gguf_cache.cached_conversion(source, broken, root=tmp_path / "cache")
    leftovers = [p for p in (tmp_path / "cache" / "models").iterdir() if p.is_dir()]
    assert leftovers == []


def _racer(source: str, root: str, log: str, go: multiprocessing.synchronize.Event) -> None:
    go.wait()
    gguf_cache.cached_conversion(Path(source), _write_build(Path(log)), root=Path(root))


def test_two_processes_starting_together_build_once(tmp_path: Path, source: Path) -> None:
    log = tmp_path / "log"
    ctx = multiprocessing.get_context("spawn")
    go = ctx.Event()
    procs = [
        ctx.Process(target=_racer, args=(str(source), str(tmp_path / "cache"), str(log), go))
        for _ in range(2)
    ]
    for p in procs:
        p.start()
    go.set()
    for p in procs:
        p.join()
    assert [p.exitcode for p in procs] == [0, 0]
    assert _builds(log) == 1


def test_cache_root_follows_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("OSMOSIS_CACHE_DIR", str(tmp_path / "explicit"))
    assert gguf_cache.cache_root() == tmp_path / "explicit"
    monkeypatch.delenv("OSMOSIS_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert gguf_cache.cache_root() == tmp_path / "xdg" / "osmosis"


@pytest.mark.slow
def test_the_cached_embedded_model_equals_the_gguf_load(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import torch

    from osmosis_trainer.models import load_model

    monkeypatch.setenv("OSMOSIS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("OSMOSIS_GGUF_CACHE", "0")
    direct = load_model("embedded")
    monkeypatch.setenv("OSMOSIS_GGUF_CACHE", "1")
    load_model("embedded")  # builds the cache
    cached = load_model("embedded")  # reads it
    ids = direct.tokenizer("What is 2 + 3?", return_tensors="pt").input_ids
    assert (
        cached.tokenizer("What is 2 + 3?", return_tensors="pt").input_ids.tolist() == ids.tolist()
    )
    assert cached.tokenizer.chat_template == direct.tokenizer.chat_template
    with torch.no_grad():
        a = direct.model(ids).logits
        b = cached.model(ids).logits
    assert torch.equal(a, b)


def test_a_planted_lock_file_is_refused_not_waited_on(tmp_path: Path, source: Path) -> None:
    """The lock is opened as every run file is (``safe_io.locked``): a FIFO planted in its
    place would block a plain open forever, a link would be written through."""
    from osmosis_ai.errors import UnreadableFileError

    log = tmp_path / "log"
    root = tmp_path / "cache"
    folder = gguf_cache.cached_conversion(source, _write_build(log), root=root)
    gguf_cache.discard(folder)
    lock = folder.parent / f"{folder.name}.lock"
    lock.unlink()
    os.mkfifo(lock)
    with pytest.raises(UnreadableFileError, match="FIFO"):
        gguf_cache.cached_conversion(source, _write_build(log), root=root)
    assert _builds(log) == 1
