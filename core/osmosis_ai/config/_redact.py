"""Secrets out of what a config leaves behind: run snapshots, ``train info``, the dashboard, trackers.

One rule, used everywhere a config is written down or sent away (:func:`redact_config`): every
``[env]`` value, and every value whose key looks like a secret (a ``_``-separated part that is
``token``, ``secret``, ``password``, ``passwd``, ``credential(s)`` or ``apikey``, or the pair
``api_key``), becomes ``"<redacted>"``; inside a URL, its password (``https://user:pw@host``)
and the value of every query or fragment parameter named like a secret (``access_token``,
``token``, ``key``, ``api_key``, ``sig``, ``signature``, ``X-Amz-Security-Token``, ...) too.
``max_tokens`` is not a secret (``tokens`` is not ``token``).

Messages that name a URL (a failed call, an unreachable server) are built from
:func:`redact_url`, and text that may quote one (an exception from an HTTP client) goes through
:func:`redact_urls`, so failures, statuses, logs and the dashboard never show a credential.

The worker still needs the real values: the command that starts it reads them from the user's
own config (on resume, from that file again) and writes them to the worker's stdin, never
through the run folder (:func:`secret_values` / :func:`restore_secrets`).
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Mapping
from typing import Any

__all__ = [
    "REDACTED",
    "dumps_toml",
    "is_secret_key",
    "literal_secrets",
    "redact_config",
    "redact_url",
    "redact_urls",
    "restore_secrets",
    "secret_values",
]

REDACTED = "<redacted>"
"""What a secret value reads as once redacted."""

_SECRET_PARTS = frozenset(
    {"token", "secret", "password", "passwd", "credential", "credentials", "apikey"}
)
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s\"'<>`]+")
_URL_PASSWORD = re.compile(r"^(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/?#:@\s]*:)[^/?#@\s]+(?=@)")
_PARAM = re.compile(r"(?P<head>(?:^|[?&#;])(?P<name>[^=&#;?]+)=)(?P<value>[^&#;]*)")
_QUERY_SECRET_PARTS = frozenset(
    {
        "key",
        "sig",
        "signature",
        "auth",
        "authorization",
        "jwt",
        "session",
        "sessionid",
        "code",
        "pass",
        "pwd",
        "credential",
    }
)
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")

Path_ = tuple[str, ...]


def is_secret_key(key: str) -> bool:
    """``api_key``, ``hf_token``, ``client_secret``, ``OPENAI_API_KEY``: yes; ``max_tokens``: no."""
    parts = [p for p in re.split(r"[^a-z0-9]+", key.lower()) if p]
    if any(p in _SECRET_PARTS for p in parts):
        return True
    return any(a == "api" and b == "key" for a, b in zip(parts, parts[1:], strict=False))


def _secret_param(name: str) -> bool:
    parts = [p for p in re.split(r"[^a-z0-9]+", name.lower()) if p]
    return is_secret_key(name) or any(p in _QUERY_SECRET_PARTS for p in parts)


def _redact_params(part: str) -> str:
    return _PARAM.sub(
        lambda m: (
            m.group("head") + REDACTED
            if m.group("value") and _secret_param(m.group("name"))
            else m.group(0)
        ),
        part,
    )


def redact_url(url: str) -> str:
    """``url`` as a message may show it: the password of its user info and the values of its
    secret-named query and fragment parameters become ``<redacted>``; the rest is kept, so the
    host, port and path still say which server is meant.

    ``http://alice:pw@h:9/v1?access_token=t&x=1`` -> ``http://alice:<redacted>@h:9/v1?access_token=<redacted>&x=1``
    """
    url = _URL_PASSWORD.sub(lambda m: m.group("head") + REDACTED, url, count=1)
    head, sep, rest = url.partition("?") if "?" in url else url.partition("#")
    if not sep:
        return url
    return head + sep + _redact_params(rest)


def redact_urls(text: str) -> str:
    """``text`` with every URL in it passed through :func:`redact_url` (an exception message,
    a log line)."""
    return _URL.sub(lambda m: redact_url(m.group(0)), text)


def _secret_paths(data: Mapping[str, Any], prefix: Path_ = ()) -> list[Path_]:
    out: list[Path_] = []
    for key, value in data.items():
        path = (*prefix, str(key))
        if path == ("env",) and isinstance(value, Mapping):
            out.extend((*path, str(k)) for k, v in value.items() if v not in (None, ""))
        elif isinstance(value, Mapping):
            out.extend(_secret_paths(value, path))
        elif is_secret_key(str(key)) and value not in (None, "", [], {}):
            out.append(path)
    return out


def _url_paths(data: Mapping[str, Any], prefix: Path_ = ()) -> list[Path_]:
    """Paths of strings holding a URL with a password (redacted in place, not whole)."""
    out: list[Path_] = []
    for key, value in data.items():
        path = (*prefix, str(key))
        if isinstance(value, Mapping):
            out.extend(_url_paths(value, path))
        elif isinstance(value, str) and _without_url_passwords(value) != value:
            out.append(path)
    return out


def _get(data: Mapping[str, Any], path: Path_) -> Any:
    value: Any = data
    for key in path:
        value = value[key]
    return value


def _without_url_passwords(value: Any) -> Any:
    if isinstance(value, str):
        return redact_urls(value)
    if isinstance(value, list):
        return [_without_url_passwords(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _without_url_passwords(v) for k, v in value.items()}
    return value


def redact_config(data: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a config table (parsed TOML or ``model_dump()``) with its secrets redacted."""
    out: dict[str, Any] = _without_url_passwords(dict(data))
    for path in _secret_paths(data):
        holder = out
        for key in path[:-1]:
            holder[key] = dict(holder[key])
            holder = holder[key]
        holder[path[-1]] = REDACTED
    return out


def secret_values(data: Mapping[str, Any]) -> dict[str, Any]:
    """The values :func:`redact_config` hides, by dotted path (``"remote.api_key"``), for
    handing to the worker; placeholders already redacted are left out."""
    found = {".".join(p): _get(data, p) for p in [*_url_paths(data), *_secret_paths(data)]}
    return {k: v for k, v in found.items() if v != REDACTED and REDACTED not in str(v)}


def restore_secrets(data: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` with the redacted values put back from ``values`` (dotted paths); paths that do
    not exist in ``data`` are ignored (they cannot smuggle new settings in)."""
    out: dict[str, Any] = copy.deepcopy(dict(data))
    for dotted, value in values.items():
        path = tuple(dotted.split("."))
        holder = out
        try:
            for key in path[:-1]:
                holder = holder[key]
        except (KeyError, TypeError):
            continue
        current = holder.get(path[-1]) if isinstance(holder, dict) else None
        if current is not None and current in (REDACTED, _without_url_passwords(value)):
            holder[path[-1]] = value
    return out


def literal_secrets(data: Mapping[str, Any]) -> list[str]:
    """``[section].key`` of every secret-shaped value written in the config file itself
    (``[env]`` keys count when their name looks like a secret: ``OPENAI_API_KEY``)."""
    out = []
    for path in _secret_paths(data):
        if path[0] == "env" and not is_secret_key(path[-1]):
            continue
        if _get(data, path) != REDACTED:
            out.append(f"[{'.'.join(path[:-1])}].{path[-1]}")
    return out


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else json.dumps(key)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        items = ", ".join(f"{_toml_key(str(k))} = {_toml_value(v)}" for k, v in value.items())
        return "{ " + items + " }" if items else "{}"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def dumps_toml(data: Mapping[str, Any], *, header: str = "") -> str:
    """``data`` (a parsed TOML table of plain values) written back as TOML."""
    lines = [f"# {line}" for line in header.splitlines()]

    def table(prefix: Path_, value: Mapping[str, Any]) -> None:
        plain = {k: v for k, v in value.items() if not isinstance(v, Mapping)}
        nested = {k: v for k, v in value.items() if isinstance(v, Mapping)}
        if prefix and (plain or not nested):
            lines.append("")
            lines.append("[" + ".".join(_toml_key(p) for p in prefix) + "]")
        lines.extend(f"{_toml_key(str(k))} = {_toml_value(v)}" for k, v in plain.items())
        for k, v in nested.items():
            table((*prefix, str(k)), v)

    table((), data)
    return "\n".join(lines).lstrip("\n") + "\n"
