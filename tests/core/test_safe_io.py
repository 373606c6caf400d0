"""``osmosis_ai.safe_io``: what it reads as it is, and what it refuses (with the reason)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from osmosis_ai.errors import UnreadableFileError
from osmosis_ai.safe_io import (
    MAX_INT_DIGITS,
    MAX_JSON_DEPTH,
    loads_json,
    open_append,
    read_json,
    read_jsonl,
    read_text,
    read_toml,
)


def test_brackets_and_digits_inside_strings_are_text_not_structure() -> None:
    value = {"s": "[" * 5000 + '\\"{' * 300, "n": "9" * 5000, "deep": [[[[1]]]]}
    assert loads_json(json.dumps(value)) == value


def test_the_limits_are_inclusive() -> None:
    at_limit = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert loads_json(at_limit) is not None
    with pytest.raises(ValueError, match="nested too deeply"):
        loads_json("[" + at_limit + "]")
    assert loads_json("-" + "9" * MAX_INT_DIGITS) == -int("9" * MAX_INT_DIGITS)
    with pytest.raises(ValueError, match=f"{MAX_INT_DIGITS + 1} digits"):
        loads_json("1" * (MAX_INT_DIGITS + 1))


def test_a_deep_value_is_refused_even_with_little_stack_left() -> None:
    def nest(n: int) -> object:
        return loads_json("[" * 200_000) if n == 0 else nest(n - 1)

    with pytest.raises(ValueError, match="nested too deeply"):
        nest(900)


def test_links_below_the_root_are_never_followed(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "f.json").write_text('{"ok": 1}')
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "linked").symlink_to(tmp_path / "real", target_is_directory=True)
    (tmp_path / "store" / "f.json").symlink_to(tmp_path / "real" / "f.json")
    store = tmp_path / "store"
    for path in (store / "linked" / "f.json", store / "f.json"):
        with pytest.raises(UnreadableFileError, match="symbolic link") as caught:
            read_json(path, under=store)
        assert caught.value.path == str(path) and not caught.value.missing
    # Without a root, a link the user named is followed when asked to.
    assert read_json(store / "f.json", follow=True) == {"ok": 1}


def test_dot_dot_never_leaves_the_root(tmp_path: Path) -> None:
    (tmp_path / "secret.json").write_text("{}")
    (tmp_path / "store").mkdir()
    with pytest.raises(UnreadableFileError, match="not a plain path inside"):
        read_json(tmp_path / "store" / ".." / "secret.json", under=tmp_path / "store")


def test_missing_is_told_apart_from_unreadable(tmp_path: Path) -> None:
    with pytest.raises(UnreadableFileError) as caught:
        read_json(tmp_path / "none.json", under=tmp_path)
    assert caught.value.missing and "no such file" in str(caught.value)
    os.mkfifo(tmp_path / "pipe.json")
    with pytest.raises(UnreadableFileError, match="FIFO") as fifo:
        read_json(tmp_path / "pipe.json", under=tmp_path)
    assert not fifo.value.missing
    with pytest.raises(UnreadableFileError, match="a folder"):
        read_text(tmp_path, follow=True)


def test_size_is_checked_before_reading(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    with big.open("wb") as fh:
        fh.truncate(2048)
    with pytest.raises(UnreadableFileError, match=r"more than the 0\.0 MB"):
        read_json(big, max_bytes=1024)


def test_text_is_strict_utf8_without_a_bom(tmp_path: Path) -> None:
    (tmp_path / "bom.json").write_bytes(b'\xef\xbb\xbf{"a": 1}')
    assert read_json(tmp_path / "bom.json") == {"a": 1}
    (tmp_path / "bad.json").write_bytes(b'{"a": "\xff"}')
    with pytest.raises(UnreadableFileError, match="byte 7 is 0xff"):
        read_json(tmp_path / "bad.json")


def test_jsonl_reports_each_bad_line_and_a_torn_last_one(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_bytes(b'{"a": 1}\r\n\n[2]\n\xff\n' + b"1" * 200 + b'\n{"b": 2}\n{"torn')
    found = read_jsonl(path)
    assert found.objects() == [{"a": 1}, {"b": 2}]
    assert [n for n, _ in found.bad] == [4, 5, 7]
    assert "incomplete" in dict(found.bad)[7]
    assert found.problems[-1] == f"{path}:3: not a JSON object"


def test_toml_limits(tmp_path: Path) -> None:
    (tmp_path / "ok.toml").write_text('[[a]]\nx = [[1], [2]]\ny = "[[[[["\n')
    assert read_toml(tmp_path / "ok.toml")[1] == {"a": [{"x": [[1], [2]], "y": "[[[[["}]}
    (tmp_path / "int.toml").write_text("x = " + "1" * 5000 + "\n")
    with pytest.raises(UnreadableFileError, match="more than 4300 digits"):
        read_toml(tmp_path / "int.toml")


@pytest.mark.parametrize(
    "text",
    [
        'x = "' + "[" * 500 + '"\n',
        "x = '" + "[" * 500 + "'\n",
        'x = """\n' + "{" * 500 + '\n"""\n',
        "x = '''\n" + "[" * 500 + "\n'''\n",
        "# " + "[" * 500 + "\nx = 1\n",
        'x = "a\\"' + "[" * 500 + '"\n',
    ],
    ids=["basic", "literal", "multiline", "multiline-literal", "comment", "escaped-quote"],
)
def test_toml_brackets_in_strings_and_comments_are_not_nesting(tmp_path: Path, text: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(text)
    _, table = read_toml(path)
    assert table.get("x") is not None


def test_toml_nesting_after_a_hash_inside_a_string_is_still_counted(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('x = "#"\ny = ' + "[" * 500 + "]" * 500 + "\n")
    with pytest.raises(UnreadableFileError, match="nested too deeply"):
        read_toml(path)


def test_open_append_creates_and_appends_but_never_writes_through_or_blocks(
    tmp_path: Path,
) -> None:
    log = tmp_path / "train.log"
    for line in (b"one\n", b"two\n"):
        fd = open_append(log)
        os.write(fd, line)
        os.close(fd)
    assert log.read_bytes() == b"one\ntwo\n"
    outside = tmp_path / "outside"
    outside.write_text("kept")
    (tmp_path / "linked").symlink_to(outside)
    (tmp_path / "dangling").symlink_to(tmp_path / "would-be-created")
    os.mkfifo(tmp_path / "fifo")  # nobody reads it: a plain open would wait forever
    (tmp_path / "folder").mkdir()
    reasons = {"linked": "symbolic link", "dangling": "symbolic link", "fifo": "a FIFO",
               "folder": "directory"}
    for name, reason in reasons.items():
        with pytest.raises(UnreadableFileError, match=reason):
            open_append(tmp_path / name)
    assert outside.read_text() == "kept" and not (tmp_path / "would-be-created").exists()
