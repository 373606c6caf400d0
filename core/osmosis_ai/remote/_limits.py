"""Structural limits on untrusted JSON: nesting depth and encodable text.

Deeply nested JSON makes Python's parser, pydantic's serializer and ``json.dumps`` raise
(RecursionError, "maximum serialization depth") far from where the value entered; a lone
UTF-16 surrogate (``"\\ud800"``) parses but cannot be encoded to send on. Both are refused
where a request enters, before anything is admitted.
"""

from __future__ import annotations

import re
from itertools import accumulate
from typing import Any

__all__ = ["MAX_JSON_DEPTH", "body_nests_too_deep", "check_plain_json"]

MAX_JSON_DEPTH = 64
"""Deepest nesting of lists/objects accepted in a request body (the body itself is level 1)."""

_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


def body_nests_too_deep(body: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether the JSON text ``body`` nests lists/objects deeper than ``limit``.

    Scans the raw bytes (no parsing, so no recursion): string literals are dropped, then the
    running bracket count is taken. Cheap unless the body holds many brackets.
    """
    if body.count(b"[") + body.count(b"{") <= limit:
        return False
    brackets = _STRING.sub(b"", body).translate(None, _NOT_BRACKET)
    return max(accumulate(_STEP[b] for b in brackets), default=0) > limit


def check_plain_json(value: Any, what: str, limit: int = MAX_JSON_DEPTH) -> None:
    """Raise ``ValueError`` naming ``what`` if ``value`` nests deeper than ``limit`` or holds
    text that is not valid Unicode (a lone surrogate). Walks iteratively (no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            _check_text(item, what)
        elif isinstance(item, dict | list | tuple):
            if depth > limit:
                raise ValueError(
                    f"{what} nests deeper than {limit} levels of lists/objects; flatten it"
                )
            if isinstance(item, dict):
                for key, sub in item.items():
                    if isinstance(key, str):
                        _check_text(key, what)
                    stack.append((sub, depth + 1))
            else:
                stack.extend((sub, depth + 1) for sub in item)


def _check_text(text: str, what: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"{what} holds text that is not valid UTF-8 (a lone surrogate at character "
            f"{exc.start}); send well-formed Unicode"
        ) from None
