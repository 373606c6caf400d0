"""Loading a TOML config into its model, with errors that say file, line, key path and fix."""

from __future__ import annotations

import difflib
import os
import types
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from osmosis_ai.config._files import ConfigFile, EvalConfig, TrainingConfig
from osmosis_ai.config._lines import key_lines
from osmosis_ai.errors import ConfigError, UnreadableFileError
from osmosis_ai.safe_io import read_toml as read_checked_toml

__all__ = ["load_config", "load_eval_config", "load_training_config"]

TFile = TypeVar("TFile", bound=ConfigFile)
KeyPath = tuple[str | int, ...]


def load_eval_config(path: str | os.PathLike[str]) -> EvalConfig:
    """Load ``configs/eval/<name>.toml``.

    Raises:
        ConfigError: the file is missing or not TOML, a section or key is unknown (with the
            closest valid name), a value has the wrong type, or a required key is missing.
    """
    return load_config(path, EvalConfig)


def load_training_config(path: str | os.PathLike[str]) -> TrainingConfig:
    """Load ``configs/training/<name>.toml`` (raises :class:`ConfigError` like
    :func:`load_eval_config`)."""
    return load_config(path, TrainingConfig)


def read_toml(p: Path) -> tuple[str, dict[str, Any]]:
    """The text and the table of TOML file ``p``; every unreadable file is one ConfigError.

    Read through :mod:`osmosis_ai.safe_io`: a regular file (a link the user made is followed,
    a FIFO or device is refused without blocking), at most 4 MB, strict UTF-8, arrays nested at
    most 100 deep and no integer past Python's 4300-digit limit.
    """
    try:
        return read_checked_toml(p, follow=True)
    except UnreadableFileError as exc:
        fix = "save the file as UTF-8" if "UTF-8" in exc.reason else "fix or replace the file"
        raise ConfigError(f"{p}: {exc.reason}; {fix}") from None


def load_config(path: str | os.PathLike[str], model: type[TFile]) -> TFile:
    """Load a TOML file into ``model`` (a :class:`ConfigFile` subclass) and bind its paths."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{p}: config file not found")
    text, data = read_toml(p)
    problems = _unknown_keys(data, model, model, ())
    try:
        config = model.model_validate(data)
    except ValidationError as exc:
        problems += _translate(exc, model)
    else:
        if not problems:
            config._bind(p)
            return config
    lines = key_lines(text)
    rendered = []
    for keypath, message in problems:
        names = tuple(k for k in keypath if isinstance(k, str))
        line = lines.get(names) or lines.get(names[:1])
        rendered.append(f"{p}:{line}: {message}" if line else f"{p}: {message}")
    if len(rendered) == 1:
        raise ConfigError(rendered[0])
    raise ConfigError(f"{p}: {len(rendered)} problems:\n" + "\n".join(f"  {r}" for r in rendered))


def _keypath(parts: KeyPath) -> str:
    """``("training", "lr")`` -> ``[training].lr``; ``("secrets", "required", 0)`` ->
    ``[secrets].required[0]``."""
    if not parts:
        return "(top level)"
    out = f"[{parts[0]}]"
    for part in parts[1:]:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The BaseModel inside ``annotation`` (``X``, ``X | None``), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) in (Union, types.UnionType):
        for arg in get_args(annotation):
            found = _model_in(arg)
            if found is not None:
                return found
    return None


def _unknown_keys(
    data: dict[str, Any], root: type[BaseModel], model: type[BaseModel], prefix: tuple[str, ...]
) -> list[tuple[KeyPath, str]]:
    problems: list[tuple[KeyPath, str]] = []
    fields = model.model_fields
    for key, value in data.items():
        if key in fields:
            sub = _model_in(fields[key].annotation)
            if sub is not None and isinstance(value, dict):
                problems += _unknown_keys(value, root, sub, (*prefix, key))
            continue
        problems.append(((*prefix, key), _unknown_message(root, model, prefix, key, value)))
    return problems


def _unknown_message(
    root: type[BaseModel], model: type[BaseModel], prefix: tuple[str, ...], key: str, value: Any
) -> str:
    valid = list(model.model_fields)
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    if not prefix:
        if isinstance(value, dict):
            hint = f"did you mean [{close[0]}]? " if close else ""
            return (
                f"unknown section [{key}]; {hint}valid sections: "
                + ", ".join(f"[{v}]" for v in valid)
            )
        owner = _section_with(model, key)
        hint = f"did you mean {owner}? " if owner else ""
        return f"unknown top-level key '{key}'; {hint}keys belong inside a [section]"
    where = _keypath((*prefix, key))
    if close:
        return f"unknown key {where}; did you mean '{close[0]}'?"
    # The key may belong to another section ([training].rollout_temperature -> [sampling]).
    owner = _section_with(root, key)
    hint = f"did you mean {owner}? " if owner else ""
    return f"unknown key {where}; {hint}valid keys in [{prefix[-1]}]: {', '.join(valid)}"


def _section_with(root: type[BaseModel], key: str) -> str | None:
    for name, info in root.model_fields.items():
        sub = _model_in(info.annotation)
        if sub is not None and key in sub.model_fields:
            return f"[{name}].{key}"
    return None


def _describe_type(annotation: Any) -> str:
    """A TOML-flavoured name for a field type: ``an integer``, ``a string or nothing``..."""
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        names = [_describe_type(a) for a in get_args(annotation) if a is not type(None)]
        return " or ".join(names)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(annotation))
    if origin is list:
        (inner,) = get_args(annotation) or (Any,)
        return f"an array of {_describe_type(inner).removeprefix('a ').removeprefix('an ')}s"
    if origin is dict:
        return "a table"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "a table"
    simple = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}
    return simple.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _field_at(model: type[BaseModel], loc: tuple[Any, ...]) -> tuple[KeyPath, Any]:
    """Walk a pydantic error location along the model: (key path, annotation at its end)."""
    parts: list[str | int] = []
    current: type[BaseModel] | None = model
    annotation: Any = None
    for item in loc:
        if current is not None and isinstance(item, str) and item in current.model_fields:
            annotation = current.model_fields[item].annotation
            current = _model_in(annotation)
            parts.append(item)
        elif isinstance(item, int) and get_origin(annotation) is list:
            parts.append(item)
            annotation = (get_args(annotation) or (Any,))[0]
        elif isinstance(item, str) and get_origin(annotation) is dict and current is None:
            parts.append(item)
            annotation = (get_args(annotation) or (Any, Any))[1]
        else:
            break  # a union member tag such as 'str' or 'list[str]'
    return tuple(parts), annotation


def _translate(exc: ValidationError, model: type[BaseModel]) -> list[tuple[KeyPath, str]]:
    problems: dict[KeyPath, str] = {}
    for err in exc.errors():
        keypath, annotation = _field_at(model, tuple(err["loc"]))
        if keypath in problems or err["type"] == "extra_forbidden":
            continue  # reported once; unknown keys by _unknown_keys
        where = _keypath(keypath)
        msg = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] == "missing":
            if len(keypath) == 1:
                problems[keypath] = f"missing section {where}; add it with its required keys"
            else:
                problems[keypath] = f"{where} is required; add it under [{keypath[0]}]"
            continue
        value = err.get("input")
        kind = str(err["type"])
        if kind.endswith(("_type", "_parsing")) or kind == "literal_error":
            expected = _describe_type(annotation) if annotation is not None else "a valid value"
            got = f"{value!r} ({type(value).__name__})"
            problems[keypath] = f"{where}: expected {expected}, got {got}"
        elif isinstance(value, dict | list):
            problems[keypath] = f"{where}: {msg}"
        else:
            problems[keypath] = f"{where}: {msg} (got {value!r})"
    return list(problems.items())


