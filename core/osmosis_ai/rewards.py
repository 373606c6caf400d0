"""osmosis-ai 0.2's reward decorators, and the grader they make.

``@osmosis_reward`` marks a function ``(solution_str: str, ground_truth: str, extra_info: dict
| None = None, **kwargs) -> float``; ``@osmosis_rubric`` the same with ``ground_truth: str |
None``. Both check that signature when the first parameter is ``solution_str`` (any other
signature is accepted as in 0.2), and check that each call returns a float.
:func:`reward_grader` turns such a function into a :class:`~osmosis_ai.rollout.Grader`: each
sample's final answer and the row's label go in, the float comes back as the reward.
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

from osmosis_ai.rollout import Grader, GraderContext

__all__ = ["osmosis_reward", "osmosis_rubric", "reward_grader"]

F = TypeVar("F", bound=Callable[..., Any])


def _is(annotation: Any, kind: type, *, optional: bool = False) -> bool:
    if annotation is kind or annotation == kind.__name__:
        return True
    if optional and get_origin(annotation) in (Union, types.UnionType):
        return all(a is type(None) or _is(a, kind) for a in get_args(annotation))
    return get_origin(annotation) is kind


def _check(func: Callable[..., Any], what: str, *, optional_truth: bool) -> None:
    params = list(inspect.signature(func).parameters.values())
    if not params or params[0].name != "solution_str":
        return  # 0.2 accepted any other signature unchecked
    try:
        hints = get_type_hints(func)
    except Exception:
        hints = {}
    where = f"@{what} {func.__qualname__}"
    if len(params) < 3:
        raise TypeError(
            f"{where}: needs (solution_str: str, ground_truth: str, extra_info: dict | None = "
            f"None), got {len(params)} parameter(s)"
        )
    if not _is(hints.get("solution_str", params[0].annotation), str):
        raise TypeError(f"{where}: the first parameter 'solution_str' must be annotated str")
    if params[1].name != "ground_truth":
        raise TypeError(f"{where}: the second parameter must be named 'ground_truth'")
    if not _is(hints.get("ground_truth", params[1].annotation), str, optional=optional_truth):
        kind = "str or str | None" if optional_truth else "str"
        raise TypeError(f"{where}: 'ground_truth' must be annotated {kind}")
    if params[2].name != "extra_info":
        raise TypeError(f"{where}: the third parameter must be named 'extra_info'")
    if not _is(hints.get("extra_info", params[2].annotation), dict, optional=True):
        raise TypeError(f"{where}: 'extra_info' must be annotated dict or dict | None")
    if params[2].default is inspect.Parameter.empty:
        raise TypeError(f"{where}: 'extra_info' must default to None")


def _checked_float(func: Callable[..., Any], result: Any) -> Any:
    if isinstance(result, bool) or not isinstance(result, int | float):
        raise TypeError(f"{func.__qualname__} must return a float, got {type(result).__name__}")
    return float(result)


def _wrap(func: F, what: str, *, optional_truth: bool) -> F:
    _check(func, what, optional_truth=optional_truth)
    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            return _checked_float(func, await func(*args, **kwargs))

        wrapper: Any = async_wrapper
    else:

        @functools.wraps(func)
        def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
            return _checked_float(func, func(*args, **kwargs))

        wrapper = sync_wrapper
    wrapper.__osmosis_reward__ = what
    return wrapper  # type: ignore[no-any-return]


def osmosis_reward(func: F) -> F:
    """Mark (and check) a reward function ``(solution_str, ground_truth, extra_info=None)``."""
    return _wrap(func, "osmosis_reward", optional_truth=False)


def osmosis_rubric(func: F) -> F:
    """Mark (and check) a rubric function; ``ground_truth`` may be ``str | None``."""
    return _wrap(func, "osmosis_rubric", optional_truth=True)


def _final_text(messages: Sequence[Mapping[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "assistant" and isinstance(message.get("content"), str):
            return str(message["content"])
    return ""


def reward_grader(func: Callable[..., Any]) -> type[Grader[Any]]:
    """A ``Grader`` class that rewards each sample with ``func(answer, label, extra_info)``.

    ``extra_info`` is the row's metadata. Put ``class MyGrader(reward_grader(my_fn)): pass`` in
    the entrypoint (or assign it to a module-level name) for discovery to find it.
    """

    class RewardFunctionGrader(Grader[Any]):
        async def grade(self, ctx: GraderContext[Any]) -> None:
            for sample_id, sample in ctx.samples.items():
                value = func(_final_text(sample.messages), ctx.label or "", dict(ctx.metadata))
                if inspect.isawaitable(value):
                    value = await value
                ctx.set_sample_reward(sample_id, _checked_float(func, value))

    RewardFunctionGrader.__name__ = RewardFunctionGrader.__qualname__ = (
        f"{getattr(func, '__name__', 'reward')}_grader"
    )
    return RewardFunctionGrader
